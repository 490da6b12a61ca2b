#include "contain/mounts.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "contain/disk.h"

namespace cordon::contain {
namespace {

bool Has(const MountPlan& plan, MountStep::Op op, const std::string& target) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan.steps()[i].op == op && plan.steps()[i].target == target) return true;
  }
  return false;
}

// A private workspace is a tmpfs of the sandbox's own, with the bounds it
// was given, and nothing of the host's is shown at /workspace.
TEST(MountPlanTest, APrivateWorkspaceIsATmpfsOfItsOwn) {
  MountRequest r;
  r.system_dirs = {"/usr"};
  r.workspace = "/tmp";
  r.tmp_size_bytes = 1 << 20;
  r.workspace_tmpfs = "mode=0700" + TmpfsLimitOptions(DiskLimits{4 << 20, 64});
  auto built = MountPlan::Build(r);
  ASSERT_TRUE(built) << built.error().message();
  EXPECT_FALSE(Has(*built, MountStep::Op::kAttach, "/workspace"));
  EXPECT_FALSE(Has(*built, MountStep::Op::kBind, "/workspace"));
  int found = 0;
  for (size_t i = 0; i < built->size(); ++i) {
    const MountStep& s = built->steps()[i];
    if (s.op != MountStep::Op::kTmpfs || s.target != std::string("/workspace")) continue;
    ++found;
    EXPECT_EQ(std::string(s.source), "mode=0700,size=4194304,nr_inodes=64");
    EXPECT_EQ(s.flags, static_cast<unsigned long>(MS_NOSUID | MS_NODEV));
  }
  EXPECT_EQ(found, 1);
  EXPECT_NE(std::find(built->writable().begin(), built->writable().end(), "/workspace"),
            built->writable().end());
}

TEST(MountPlanTest, SystemDirsSecretsAndTheSandboxsOwnParts) {
  MountRequest r;
  r.system_dirs = {"/usr", "/bin", "/no/such/dir", "/etc"};
  r.hidden_paths = {"/etc/shadow", "/etc/no-such-secret", "/root/.ssh"};
  r.binds = {{"/etc/hostname", "/opt/hostname", false}, {"/tmp", "/scratch", true}};
  r.workspace = "/tmp";
  r.tmp_size_bytes = 1 << 20;
  auto built = MountPlan::Build(r);
  ASSERT_TRUE(built) << built.error().message();
  const MountPlan& plan = *built;

  EXPECT_TRUE(Has(plan, MountStep::Op::kAttach, "/usr"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kAttach, "/etc"));
  EXPECT_FALSE(Has(plan, MountStep::Op::kAttach, "/no/such/dir"));
  // A merged /usr's /bin is a symlink, and stays one.
  struct stat st {};
  if (::lstat("/bin", &st) == 0 && S_ISLNK(st.st_mode)) {
    EXPECT_TRUE(Has(plan, MountStep::Op::kSymlink, "/bin"));
  }
  // Secrets beneath what is shown are covered; others need nothing.
  // (A file by cordon's own empty file, never a host inode such as the
  // host's /dev/null: CVE-2025-31133's pattern.)
  EXPECT_TRUE(Has(plan, MountStep::Op::kBind, "/etc/shadow"));
  EXPECT_FALSE(Has(plan, MountStep::Op::kAttach, "/etc/shadow"));
  EXPECT_FALSE(Has(plan, MountStep::Op::kBind, "/root/.ssh"));
  EXPECT_FALSE(Has(plan, MountStep::Op::kAttach, "/root/.ssh"));
  for (size_t i = 0; i < plan.size(); ++i) {
    const MountStep& s = plan.steps()[i];
    if (s.op == MountStep::Op::kBind && s.target == std::string("/etc/shadow")) {
      EXPECT_EQ(plan.Describe(i), "cover /etc/shadow");
      EXPECT_EQ(std::string(s.source).find("/dev"), std::string::npos) << s.source;
    }
  }
  EXPECT_TRUE(Has(plan, MountStep::Op::kTmpfs, "/tmp"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kProc, "/proc"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kSymlink, "/dev/fd"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kAttach, "/dev/null"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kAttach, "/workspace"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kFile, "/opt/hostname"));  // a file bind's mount point
  EXPECT_TRUE(Has(plan, MountStep::Op::kMkdir, "/scratch"));

  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  EXPECT_TRUE(contains(plan.read_only(), "/usr"));
  EXPECT_TRUE(contains(plan.read_only(), "/opt/hostname"));
  EXPECT_TRUE(contains(plan.writable(), "/workspace"));
  EXPECT_TRUE(contains(plan.writable(), "/scratch"));
  EXPECT_FALSE(contains(plan.writable(), "/usr"));
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan.steps()[i].op == MountStep::Op::kAttach &&
        plan.steps()[i].target == std::string("/usr")) {
      EXPECT_EQ(plan.Describe(i), "bind /usr at /usr");
    }
  }
}

// A bind whose target lies beneath the workspace (or another writable
// mount) is made, with the directories it needs, following no symbolic
// link there: a run sharing the workspace may have planted one
// (CVE-2021-30465). Its steps carry the plan's no-symlinks bit (1 << 62 of
// `flags`, mounts.cc); a target elsewhere does not.
TEST(MountPlanTest, TargetsBeneathTheWorkspaceFollowNoSymlink) {
  MountRequest r;
  r.workspace = "/tmp";
  r.tmp_size_bytes = 1 << 20;
  r.binds = {{"/etc/hostname", "/workspace/sub/hostname", false}, {"/tmp", "/opt/scratch", true}};
  auto built = MountPlan::Build(r);
  ASSERT_TRUE(built) << built.error().message();
  constexpr unsigned long kNoSymlinks = 1UL << 62;
  int beneath = 0;
  for (size_t i = 0; i < built->size(); ++i) {
    const MountStep& s = built->steps()[i];
    std::string target = s.target;
    if (target.starts_with("/workspace/")) {
      ++beneath;
      EXPECT_NE(s.flags & kNoSymlinks, 0u) << built->Describe(i);
    } else if (s.op != MountStep::Op::kTmpfs) {
      EXPECT_EQ(s.flags & kNoSymlinks, 0u) << built->Describe(i);
    }
  }
  EXPECT_EQ(beneath, 3);  // mkdir /workspace/sub, the file, its bind
}

// Every host path shown is a tree the supervisor opened itself: a path
// that does not exist fails the plan, naming it.
TEST(MountPlanTest, HostPathsAreOpenedByTheSupervisor) {
  // Without CAP_SYS_ADMIN over its mount namespace a caller may not clone
  // mounts (EPERM): its sandbox binds by path, as the caller's own ids.
  if (::geteuid() != 0) GTEST_SKIP() << "open_tree(OPEN_TREE_CLONE) needs root";
  MountRequest r;
  r.workspace = "/tmp";
  r.tmp_size_bytes = 1 << 20;
  r.binds = {{"/etc/hostname", "/opt/hostname", false}};
  auto built = MountPlan::Build(r);
  ASSERT_TRUE(built) << built.error().message();
  for (size_t i = 0; i < built->size(); ++i) {
    const MountStep& s = built->steps()[i];
    // (The covers of /proc's masked files are binds of the sandbox's own
    // file, not of a host path.)
    if (s.op == MountStep::Op::kBind) {
      EXPECT_TRUE(built->Describe(i).starts_with("cover /proc/")) << built->Describe(i);
    }
    if (s.op == MountStep::Op::kAttach) {
      EXPECT_GE(s.fd, 0) << built->Describe(i);
      // Attributes are set on the detached copy where the kernel can.
      if (HasMountSetattr()) {
        EXPECT_EQ(s.attr, 0u) << built->Describe(i);
      }
    }
  }
  r.binds = {{"/no/such/source", "/data", false}};
  auto missing = MountPlan::Build(r);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("/no/such/source"), std::string::npos)
      << missing.error().message();
  EXPECT_NE(missing.error().message().find("ENOENT"), std::string::npos)
      << missing.error().message();
}

}  // namespace
}  // namespace cordon::contain
