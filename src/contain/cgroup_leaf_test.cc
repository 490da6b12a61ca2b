// The leaf move's decisions, against a model of a cgroup filesystem (this
// project's machines are hybrid: the real move is exercised in the pure v2
// VM cell, tests/hosts/).
#include "contain/cgroup_leaf.h"

#include <gtest/gtest.h>

#include <map>

namespace cordon::contain {
namespace {

constexpr const char* kMount = "/sys/fs/cgroup";

// Files as text by path; a directory exists when its cgroup.procs does.
class FakeHost final : public CgroupHost {
 public:
  mutable std::map<std::string, std::string> files;  // Write and MakeDirs change it
  bool refuse_writes = false;

  sys::Result<std::string> Read(const std::string& path) const override {
    auto it = files.find(path);
    if (it == files.end()) return sys::Fail("no " + path, ENOENT);
    return it->second;
  }
  sys::Result<void> Write(const std::string& path, std::string_view value) const override {
    if (refuse_writes) return sys::Fail(path, EACCES);
    if (!files.contains(path)) return sys::Fail(path, ENOENT);
    files[path] = std::string(value) + "\n";
    return {};
  }
  sys::Result<void> MakeDirs(const std::string& path) const override {
    if (refuse_writes) return sys::Fail(path, EACCES);
    files.try_emplace(path + "/cgroup.procs", "");
    files.try_emplace(path + "/cgroup.type", "domain\n");
    return {};
  }
  bool Exists(const std::string& path) const override { return files.contains(path); }
  bool Writable(const std::string& path) const override { return files.contains(path); }
  bool Root() const override { return true; }
};

CgroupLayout PureV2(const std::string& own) {
  CgroupLayout layout;
  layout.v2 = Hierarchy{2, {}, kMount, own, own == "/" ? kMount : kMount + own};
  return layout;
}

FakeHost ServiceHost(const std::string& procs) {
  FakeHost host;
  host.files[std::string(kMount) + "/cgroup.controllers"] = "cpuset cpu io memory pids\n";
  host.files[std::string(kMount) + "/cgroup.procs"] = "1\n";
  const std::string service = std::string(kMount) + "/system.slice/cordon.service";
  host.files[service + "/cgroup.procs"] = procs;
  host.files[service + "/cgroup.type"] = "domain\n";
  return host;
}

TEST(CgroupLeafTest, ADaemonAloneInItsServiceGroupMovesIntoALeaf) {
  FakeHost host = ServiceHost("4242\n");
  LeafMove m = MoveIntoLeaf(PureV2("/system.slice/cordon.service"), 4242, host);
  EXPECT_TRUE(m.needed);
  ASSERT_TRUE(m.moved) << m.note;
  EXPECT_EQ(m.leaf, "/sys/fs/cgroup/system.slice/cordon.service/supervisor");
  EXPECT_EQ(m.cgroup_root, "/system.slice/cordon.service/cordon");
  EXPECT_EQ(host.files.at(m.leaf + "/cgroup.procs"), "4242\n");
}

TEST(CgroupLeafTest, AContainersNamespaceRootIsNotTheTrueRoot) {
  // In a cgroup namespace "/" is the container's group: it has cgroup.type.
  FakeHost host;
  host.files[std::string(kMount) + "/cgroup.controllers"] = "memory pids\n";
  host.files[std::string(kMount) + "/cgroup.procs"] = "1\n";
  host.files[std::string(kMount) + "/cgroup.type"] = "domain\n";
  LeafMove m = MoveIntoLeaf(PureV2("/"), 1, host);
  ASSERT_TRUE(m.moved) << m.note;
  EXPECT_EQ(m.leaf, "/sys/fs/cgroup/supervisor");
  EXPECT_EQ(m.cgroup_root, "/cordon");
}

TEST(CgroupLeafTest, TheTrueRootNeedsNoMove) {
  FakeHost host;
  host.files[std::string(kMount) + "/cgroup.controllers"] = "memory pids\n";
  host.files[std::string(kMount) + "/cgroup.procs"] = "1\n77\n";
  LeafMove m = MoveIntoLeaf(PureV2("/"), 77, host);
  EXPECT_FALSE(m.needed);
  EXPECT_FALSE(m.moved);
  EXPECT_NE(m.note.find("root group"), std::string::npos) << m.note;
}

TEST(CgroupLeafTest, AGroupSharedWithOtherProcessesIsLeftAsItIs) {
  FakeHost host = ServiceHost("4242\n4343\n");
  LeafMove m = MoveIntoLeaf(PureV2("/system.slice/cordon.service"), 4242, host);
  EXPECT_TRUE(m.needed);
  EXPECT_FALSE(m.moved);
  EXPECT_FALSE(m.cgroup_root);
  EXPECT_NE(m.note.find("holds 2 processes"), std::string::npos) << m.note;
  EXPECT_FALSE(
      host.files.contains("/sys/fs/cgroup/system.slice/cordon.service/supervisor/cgroup.procs"));
}

TEST(CgroupLeafTest, AHybridHostOrAControllerlessTreeNeedsNoMove) {
  FakeHost host = ServiceHost("4242\n");
  CgroupLayout hybrid = PureV2("/system.slice/cordon.service");
  hybrid.v1["memory"] = Hierarchy{1, {"memory"}, "/sys/fs/cgroup/memory", "/", ""};
  EXPECT_FALSE(MoveIntoLeaf(hybrid, 4242, host).needed);

  host.files[std::string(kMount) + "/cgroup.controllers"] = "hugetlb\n";
  LeafMove m = MoveIntoLeaf(PureV2("/system.slice/cordon.service"), 4242, host);
  EXPECT_FALSE(m.needed);
  EXPECT_NE(m.note.find("no cpu, memory or pids"), std::string::npos) << m.note;
}

TEST(CgroupLeafTest, AGroupNotDelegatedSaysWhy) {
  FakeHost host = ServiceHost("4242\n");
  host.refuse_writes = true;
  LeafMove m = MoveIntoLeaf(PureV2("/system.slice/cordon.service"), 4242, host);
  EXPECT_TRUE(m.needed);
  EXPECT_FALSE(m.moved);
  EXPECT_NE(m.note.find("cannot create the leaf"), std::string::npos) << m.note;
}

}  // namespace
}  // namespace cordon::contain
