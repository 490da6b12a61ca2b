#include "contain/cgroup_layout.h"

#include <gtest/gtest.h>

namespace cordon::contain {
namespace {

// As on this project's CI machines: v1 controllers, a controller-less v2.
constexpr const char* kHybridMountinfo =
    "25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "31 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "34 31 0:29 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "35 31 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "36 31 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
constexpr const char* kHybridCgroup =
    "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n";

TEST(CgroupLayoutTest, Hybrid) {
  CgroupLayout l = ParseCgroupLayout(kHybridMountinfo, kHybridCgroup);
  ASSERT_TRUE(l.v2);
  EXPECT_EQ(l.v2->mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(l.v2->own_dir, "/sys/fs/cgroup/unified");
  ASSERT_TRUE(l.v1.contains("memory"));
  EXPECT_EQ(l.v1["memory"].own_dir, "/sys/fs/cgroup/memory/process_api/abc");
  EXPECT_EQ(l.v1["pids"].own_dir, "/sys/fs/cgroup/pids");
  EXPECT_FALSE(l.v1.contains("name=systemd"));
  EXPECT_EQ(l.v1.size(), 3u);
}

TEST(CgroupLayoutTest, PureV2) {
  CgroupLayout l =
      ParseCgroupLayout("29 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
                        "0::/user.slice/user-1000.slice/session-2.scope\n");
  ASSERT_TRUE(l.v2);
  EXPECT_EQ(l.v2->own_dir, "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope");
  EXPECT_TRUE(l.v1.empty());
}

TEST(CgroupLayoutTest, CoMountedControllersAndEscapedPaths) {
  CgroupLayout l = ParseCgroupLayout(
      "40 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
      "41 31 0:34 / /mnt/my\\040cgroups rw - cgroup cgroup rw,memory\n",
      "3:cpu,cpuacct:/a\n4:memory:/b\n");
  EXPECT_EQ(l.v1["cpu"].own_dir, "/sys/fs/cgroup/cpu,cpuacct/a");
  EXPECT_EQ(l.v1["cpuacct"].own_dir, "/sys/fs/cgroup/cpu,cpuacct/a");
  EXPECT_EQ(l.v1["memory"].own_dir, "/mnt/my cgroups/b");
  EXPECT_FALSE(l.v2);
}

TEST(CgroupLayoutTest, MountRootOtherThanSlash) {
  // A container that sees only its part of the hierarchy, mounted at its root.
  CgroupLayout l = ParseCgroupLayout(
      "50 40 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/docker/abc/app\n");
  ASSERT_TRUE(l.v2);
  EXPECT_EQ(l.v2->own_dir, "/sys/fs/cgroup/app");
  CgroupLayout outside = ParseCgroupLayout(
      "50 40 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/../../elsewhere\n");
  EXPECT_FALSE(outside.v2);  // our group is not reachable through that mount
}

}  // namespace
}  // namespace cordon::contain
