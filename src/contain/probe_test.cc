#include "contain/probe.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include "contain/cgroup_dir.h"
#include "support.h"

namespace cordon::contain {
namespace {

TEST(ResolveCapabilitiesTest, HybridHostAsRoot) {
  CgroupPlan plan;
  plan.v2_parent = "/sys/fs/cgroup/unified/cordon";
  plan.v1_memory_parent = "/sys/fs/cgroup/memory/cordon";
  plan.v1_pids_parent = "/sys/fs/cgroup/pids/cordon";
  plan.v1_cpu_parent = "/sys/fs/cgroup/cpu/cordon";
  IsolationSupport iso;
  iso.namespaces.available = iso.namespaces.network = true;
  iso.landlock_abi = 7;
  iso.seccomp = iso.map_ids = true;
  DiskSupport disk;
  disk.state_dir = "/var/lib/cordon";
  disk.tmpfs = disk.loop_images = true;
  Probe p;
  p.capabilities = ResolveCapabilities(plan, /*nproc_effective=*/false, iso, /*root=*/true, disk);
  ASSERT_EQ(p.capabilities.size(), kAllCapabilities.size());
  EXPECT_EQ(p.Status(Capability::kFilesystem).mechanism, "mount_namespace+landlock");
  EXPECT_EQ(p.Status(Capability::kProcessView).mechanism, "pid_namespace");
  EXPECT_EQ(p.Status(Capability::kProcessTree).mechanism, "cgroup2");
  EXPECT_EQ(p.Status(Capability::kProcessTree).teardown, "cgroup.kill");
  EXPECT_EQ(p.Status(Capability::kMemory).mechanism, "cgroup1 memory");
  EXPECT_EQ(p.Status(Capability::kProcessCount).mechanism, "cgroup1 pids");
  EXPECT_EQ(p.Status(Capability::kCpu).mechanism, "cgroup1 cpu");
  EXPECT_EQ(p.Status(Capability::kDisk).mechanism, "tmpfs+loop_image");
  for (const auto& s : p.capabilities) EXPECT_TRUE(s.enforceable) << CapabilityName(s.capability);
}

TEST(ResolveCapabilitiesTest, PureV2WithControllers) {
  CgroupPlan plan;
  plan.v2_parent = "/sys/fs/cgroup/cordon";
  plan.v2_controllers = {"memory", "pids"};
  Probe p;
  p.capabilities = ResolveCapabilities(plan, false);
  EXPECT_EQ(p.Status(Capability::kMemory).mechanism, "cgroup2 memory");
  EXPECT_EQ(p.Status(Capability::kProcessCount).mechanism, "cgroup2 pids");
}

TEST(ResolveCapabilitiesTest, UnprivilegedWithoutCgroups) {
  CgroupPlan plan;
  plan.v2_problem = "cannot create the cgroup /sys/fs/cgroup/cordon: EACCES";
  plan.v1_memory_problem = "no cgroup v1 memory hierarchy is mounted";
  plan.v1_pids_problem = "no cgroup v1 pids hierarchy is mounted";
  Probe p;
  p.capabilities = ResolveCapabilities(plan, /*nproc_effective=*/true);
  const auto& tree = p.Status(Capability::kProcessTree);
  EXPECT_FALSE(tree.enforceable);
  EXPECT_EQ(tree.mechanism, "process_group");
  EXPECT_NE(tree.reason.find("setsid"), std::string::npos);
  EXPECT_FALSE(tree.fix.empty());
  const auto& memory = p.Status(Capability::kMemory);
  EXPECT_FALSE(memory.enforceable);
  EXPECT_NE(memory.reason.find("EACCES"), std::string::npos);
  // A non-root caller's RLIMIT_NPROC binds.
  EXPECT_TRUE(p.Status(Capability::kProcessCount).enforceable);
  EXPECT_EQ(p.Status(Capability::kProcessCount).mechanism, "rlimit");
  EXPECT_TRUE(p.Status(Capability::kWallClock).enforceable);
}

TEST(ResolveCapabilitiesTest, WhereNamespacesAreRefusedLandlockAloneKeepsTheFilesystem) {
  IsolationSupport iso;
  iso.namespaces.problem = "clone: ENOSPC";
  iso.landlock_abi = 6;
  iso.seccomp = true;
  Probe p;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, iso, false);
  EXPECT_TRUE(p.Status(Capability::kFilesystem).enforceable);
  EXPECT_EQ(p.Status(Capability::kFilesystem).mechanism, "landlock");
  for (Capability c : {Capability::kNetwork, Capability::kProcessView}) {
    const auto& s = p.Status(c);
    EXPECT_FALSE(s.enforceable) << CapabilityName(c);
    EXPECT_NE(s.reason.find("ENOSPC"), std::string::npos) << s.reason;
    EXPECT_FALSE(s.fix.empty());
  }
  EXPECT_EQ(p.Status(Capability::kNetwork).mechanism, "seccomp");
  EXPECT_EQ(p.Status(Capability::kSyscallFilter).mechanism, "seccomp");
  EXPECT_EQ(p.Status(Capability::kPrivileges).mechanism, "no_new_privs");
  EXPECT_TRUE(p.Status(Capability::kPrivileges).enforceable);  // not root: its own uid
  // The host's root that can switch ids: its sandbox runs as a leased uid.
  iso.host_root = true;
  iso.map_ids = true;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, iso, true);
  EXPECT_TRUE(p.Status(Capability::kPrivileges).enforceable);
  EXPECT_EQ(p.Status(Capability::kPrivileges).mechanism, "leased_uid+no_new_privs");
  // One that cannot: its sandbox would keep uid 0 on the host, not claimed.
  iso.map_ids = false;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, iso, true);
  EXPECT_FALSE(p.Status(Capability::kPrivileges).enforceable);
  EXPECT_NE(p.Status(Capability::kPrivileges).reason.find("uid 0"), std::string::npos);
  iso.host_root = false;
  iso.landlock_abi = 0;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, iso, false);
  EXPECT_FALSE(p.Status(Capability::kFilesystem).enforceable);
}

TEST(ResolveCapabilitiesTest, RootWithoutPidsCgroupCannotCountProcesses) {
  CgroupPlan plan;
  plan.v2_parent = "/x";
  plan.v1_pids_problem = "no cgroup v1 pids hierarchy is mounted";
  Probe p;
  p.capabilities = ResolveCapabilities(plan, /*nproc_effective=*/false);
  const auto& s = p.Status(Capability::kProcessCount);
  EXPECT_FALSE(s.enforceable);
  EXPECT_NE(s.reason.find("RLIMIT_NPROC is not enforced for root"), std::string::npos);
}

TEST(ProbeHostTest, EveryClaimHasItsMechanismOrItsReason) {
  auto probe = ProbeHost({});
  ASSERT_TRUE(probe);
  EXPECT_EQ(probe->euid, ::geteuid());
  for (const auto& s : probe->capabilities) {
    if (s.enforceable) {
      EXPECT_FALSE(s.mechanism.empty()) << CapabilityName(s.capability);
    } else {
      EXPECT_FALSE(s.reason.empty()) << CapabilityName(s.capability);
    }
  }
  if (::geteuid() == 0) {
    EXPECT_FALSE(NprocLimitEffective());
    EXPECT_NE(probe->Status(Capability::kProcessCount).mechanism, "rlimit");
  }
  // What the probe claims for cgroup v2 rests on a group it could create,
  // and the teardown it names on that group's control files.
  if (!probe->cgroups.v2_parent.empty()) {
    const std::string& parent = probe->cgroups.v2_parent;
    auto dir = CgroupDir::Create(parent + "/probe-test-" + std::to_string(::getpid()));
    ASSERT_TRUE(dir) << dir.error().message();
    EXPECT_EQ(dir->Kill(), probe->cgroups.v2_kill);
    const CapabilityStatus& plain = probe->StatusFor(Capability::kProcessTree, false);
    if (plain.teardown == "cgroup.kill") {
      EXPECT_TRUE(dir->Has("cgroup.kill"));
    } else if (plain.teardown == "cgroup.freeze+kill") {
      EXPECT_TRUE(dir->Has("cgroup.freeze"));
    }
    EXPECT_TRUE(dir->Remove());
  }
  EXPECT_FALSE(probe->Status(Capability::kProcessTree).teardown.empty());  // always named
}

TEST(ResolveCapabilitiesTest, WhereOnlyRunsCanBeBoundedTheHostsDiskClaimIsNotMade) {
  // A container without loop devices, on ext4 without project quotas: a
  // tmpfs bounds a run's workspace, nothing a session's. The host's claim
  // covers both, so it is not made (no claim stronger than what holds);
  // a run's own grant still gets its tmpfs bound (contain/disk.h).
  DiskSupport disk;
  disk.state_dir = "/var/lib/cordon";
  disk.filesystem = "ext4";
  disk.tmpfs = true;
  disk.project_quota_problem = "ENOSYS";
  disk.loop_problem = "no /dev/loop-control";
  Probe p;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, {}, false, disk);
  const auto& s = p.Status(Capability::kDisk);
  EXPECT_FALSE(s.enforceable);
  EXPECT_NE(s.reason.find("no /dev/loop-control"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("run workspaces can (tmpfs)"), std::string::npos) << s.reason;
  EXPECT_FALSE(s.fix.empty());
  EXPECT_TRUE(DiskStatus(disk, WorkspaceKind::kEphemeral).enforceable);
  disk.loop_images = true;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, {}, false, disk);
  EXPECT_TRUE(p.Status(Capability::kDisk).enforceable);
  EXPECT_EQ(p.Status(Capability::kDisk).mechanism, "tmpfs+loop_image");
}

TEST(ResolveCapabilitiesTest, NamespacesOfNoUseSayWhyAndTheirOwnFix) {
  IsolationSupport iso;
  iso.namespaces.problem = "a sandbox cannot mount its own /proc in its namespaces";
  iso.namespaces_fix = "unmask /proc";
  iso.landlock_abi = 6;
  iso.seccomp = true;
  Probe p;
  p.capabilities = ResolveCapabilities(CgroupPlan{}, true, iso, true);
  const auto& view = p.Status(Capability::kProcessView);
  EXPECT_FALSE(view.enforceable);
  EXPECT_EQ(view.reason.find("no user namespace can be made"), std::string::npos) << view.reason;
  EXPECT_NE(view.reason.find("its own /proc"), std::string::npos) << view.reason;
  EXPECT_EQ(view.fix, "unmask /proc");
  EXPECT_EQ(p.Status(Capability::kNetwork).fix, "unmask /proc");
  EXPECT_EQ(p.Status(Capability::kFilesystem).mechanism, "landlock");
}

// What a launch mounts, a fresh procfs in new namespaces, the probe tries:
// here, where launches work, it mounts.
TEST(ProbeHostTest, AFreshProcMountsWhereSandboxesGetNamespaces) {
  auto probe = ProbeHost({});
  ASSERT_TRUE(probe);
  if (!probe->isolation.namespaces.available) {
    GTEST_SKIP() << "no namespaces here: " << probe->isolation.namespaces.problem;
  }
  auto problem = FreshProcProblem();
  EXPECT_FALSE(problem) << *problem;
}

// As a container's runtime masks /proc (a file mounted over one of its
// files), in a mount namespace of the test's own: the kernel refuses a
// sandbox's fresh procfs, and the probe says so instead of claiming
// namespaces that no launch could use.
TEST(ProbeHostTest, AMaskedProcIsObservedAndTheNamespacesDisclaimed) {
  if (::geteuid() != 0) GTEST_SKIP() << "masking /proc needs root (a mount namespace)";
  {
    auto probe = ProbeHost({});
    ASSERT_TRUE(probe);
    if (!probe->isolation.namespaces.available) {
      GTEST_SKIP() << "no namespaces here: " << probe->isolation.namespaces.problem;
    }
  }
  std::string got = testing::OutputOfChild([] {
    std::string out;
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("/dev/null", "/proc/uptime", nullptr, MS_BIND, nullptr) != 0) {
      out = "setup failed";
    } else {
      auto problem = FreshProcProblem();
      auto probe = ProbeHost({});
      out = problem ? *problem : "mounted";
      if (probe) {
        const auto& view = probe->Status(Capability::kProcessView);
        out += "\n" + std::string(view.enforceable ? "enforced" : "disclaimed") + "\n" +
               view.reason + "\n" + view.fix;
      }
    }
    return out;
  });
  ASSERT_NE(got, "setup failed");
  EXPECT_NE(got.find("EPERM"), std::string::npos) << got;
  EXPECT_NE(got.find("/proc/uptime"), std::string::npos) << got;  // what masks it, named
  EXPECT_NE(got.find("\ndisclaimed\n"), std::string::npos) << got;
  EXPECT_NE(got.find("unmask=ALL"), std::string::npos) << got;
  EXPECT_NE(got.find("procMount: Unmasked"), std::string::npos) << got;
}

TEST(CgroupRootTest, RejectsBadPaths) {
  EXPECT_FALSE(CgroupRootProblem("/cordon"));
  EXPECT_FALSE(CgroupRootProblem("/a/b-c"));
  for (const char* bad : {"", "cordon", "/", "/a/../b", "/a//b", "/a/", "/./a"}) {
    EXPECT_TRUE(CgroupRootProblem(bad)) << bad;
  }
}

}  // namespace
}  // namespace cordon::contain
