#include "contain/grant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "contain/bounds.h"
#include "support.h"

namespace cordon::contain {
namespace {

// A host with no usable cgroup at all, as for an unprivileged user.
Probe NoCgroupProbe() {
  Probe p;
  p.cgroups.v2_problem = "cannot create the cgroup /sys/fs/cgroup/x: EACCES";
  p.cgroups.v1_memory_problem = "no cgroup v1 memory hierarchy is mounted";
  p.cgroups.v1_pids_problem = "no cgroup v1 pids hierarchy is mounted";
  p.capabilities = ResolveCapabilities(p.cgroups, /*nproc_effective=*/false);
  return p;
}

// No cgroup, but namespaces, Landlock and seccomp: isolation without a
// cgroup (an unprivileged caller).
Probe NamespacedProbe() {
  Probe p = NoCgroupProbe();
  p.isolation.namespaces.available = true;
  p.isolation.landlock_abi = 6;
  p.isolation.seccomp = true;
  p.capabilities = ResolveCapabilities(p.cgroups, false, p.isolation, /*root=*/false);
  return p;
}

class GrantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::Store::Open(dir_.path());
    ASSERT_TRUE(s) << s.error().message();
    store_.emplace(std::move(*s));
    spec_.argv = {"/bin/true"};
    spec_.owner = "tester";
    // Admission of the foundation's capabilities; isolation's are below.
    spec_.isolation.level = Isolation::kNone;
  }
  size_t Recorded() { return store_->ListGrants(true).value().size(); }

  testing::TempDir dir_;
  std::optional<store::Store> store_;
  Spec spec_;
};

TEST_F(GrantTest, AnExplicitLimitThatCannotBeEnforcedIsRefused) {
  spec_.limits.memory_bytes = 64 << 20;
  auto grant = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_FALSE(grant);
  EXPECT_EQ(grant.error().kind, AdmitError::Kind::kRefused);
  ASSERT_EQ(grant.error().missing.size(), 1u);
  EXPECT_EQ(grant.error().missing[0].capability, Capability::kMemory);
  EXPECT_NE(grant.error().message.find("memory"), std::string::npos);
  EXPECT_NE(grant.error().message.find("--permissive"), std::string::npos);
  EXPECT_EQ(Recorded(), 0u);  // refused before anything was recorded or spawned
}

TEST_F(GrantTest, ADaemonDefaultThatCannotBeEnforcedIsDegradedNotRefused) {
  Bounds bounds;                            // memory, pids, cpu, disk: all defaults
  bounds.min_isolation = Isolation::kNone;  // spec_ has none
  ASSERT_FALSE(ApplyBounds(bounds, spec_));
  auto grant = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_TRUE(grant) << grant.error().message;
  std::set<Capability> degraded;
  for (const auto& d : grant->degraded) {
    EXPECT_FALSE(d.reason.empty()) << CapabilityName(d.capability);
    degraded.insert(d.capability);
  }
  for (Capability c : {Capability::kMemory, Capability::kProcessCount, Capability::kCpu}) {
    EXPECT_TRUE(degraded.contains(c)) << CapabilityName(c);
  }
}

TEST_F(GrantTest, PermissiveRunsDegradedAndSaysWhy) {
  spec_.limits.memory_bytes = 64 << 20;
  spec_.permissive = true;
  auto grant = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_TRUE(grant) << grant.error().message;
  EXPECT_FALSE(grant->Enforces(Capability::kMemory));
  bool memory_degraded = false, tree_degraded = false;
  for (const auto& d : grant->degraded) {
    memory_degraded |= d.capability == Capability::kMemory && !d.reason.empty();
    tree_degraded |= d.capability == Capability::kProcessTree;
  }
  EXPECT_TRUE(memory_degraded);
  EXPECT_TRUE(tree_degraded);
  EXPECT_EQ(grant->Mechanism(Capability::kProcessTree), "process_group");
  EXPECT_FALSE(grant->cgroups);
  auto record = store_->GetGrant(grant->id).value();
  ASSERT_TRUE(record);
  EXPECT_EQ(record->state, "active");
  EXPECT_EQ(record->owner, "tester");
  EXPECT_EQ(record->degraded.size(), 2u);
}

TEST_F(GrantTest, ARequiredCapabilityIsRefusedEvenWhenPermissive) {
  spec_.required = {Capability::kProcessTree};
  spec_.permissive = true;
  auto grant = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_FALSE(grant);
  EXPECT_EQ(grant.error().kind, AdmitError::Kind::kRefused);
  EXPECT_EQ(grant.error().missing[0].capability, Capability::kProcessTree);
  EXPECT_EQ(grant.error().message.find("--permissive"), std::string::npos);
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(GrantTest, AnInvalidSpecNamesTheField) {
  spec_.limits.pids = 0;
  auto grant = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_FALSE(grant);
  EXPECT_EQ(grant.error().kind, AdmitError::Kind::kInvalid);
  EXPECT_EQ(grant.error().field, "limits.pids");
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(GrantTest, OnThisHostTheGrantGetsItsCgroupsAndIsRecordedActive) {
  const Probe& probe = testing::TestProbe();
  if (!probe.Status(Capability::kProcessTree).enforceable) {
    GTEST_SKIP() << "no cgroup v2 here: " << probe.Status(Capability::kProcessTree).reason;
  }
  spec_.limits.memory_bytes = 64 << 20;
  spec_.limits.pids = 16;
  spec_.permissive = true;
  auto grant = Acquire(spec_, probe, *store_);
  ASSERT_TRUE(grant) << grant.error().message;
  ASSERT_TRUE(grant->cgroups);
  ASSERT_TRUE(grant->cgroups->v2());
  EXPECT_EQ(grant->Mechanism(Capability::kProcessTree), "cgroup2");
  EXPECT_NE(grant->cgroups->v2()->path().find(testing::CgroupRoot()), std::string::npos);
  auto record = store_->GetGrant(grant->id).value();
  ASSERT_TRUE(record);
  EXPECT_EQ(record->state, "active");
  EXPECT_EQ(record->cgroups["v2"], grant->cgroups->v2()->path());
  EXPECT_EQ(record->supervisor.pid, ::getpid());
  if (grant->Enforces(Capability::kMemory)) {
    std::string path = grant->Mechanism(Capability::kMemory) == "cgroup1 memory"
                           ? record->cgroups["memory"].get<std::string>() + "/memory.limit_in_bytes"
                           : record->cgroups["v2"].get<std::string>() + "/memory.max";
    EXPECT_EQ(testing::Slurp(path), std::to_string(64 << 20) + "\n");
  }
  EXPECT_TRUE(grant->cgroups->Remove());
}

// The grant is recorded before its groups are made (a supervisor killed in
// between leaves a record for reap, not a group no record names). Where
// making them fails, that record goes, and the grant that runs without them
// is the one recorded: one record, naming no group.
TEST_F(GrantTest, AGroupThatCannotBeMadeLeavesOnlyTheDegradedGrantsRecord) {
  Probe probe = testing::TestProbe();
  if (!probe.Status(Capability::kProcessTree).enforceable) {
    GTEST_SKIP() << "no cgroup v2 here: " << probe.Status(Capability::kProcessTree).reason;
  }
  const std::string missing =
      probe.cgroups.v2_parent + "/cordon-grant-test-missing-" + std::to_string(::getpid());
  probe.cgroups.v2_parent = missing;  // mkdir beneath it fails (ENOENT)
  auto grant = Acquire(spec_, probe, *store_);
  ASSERT_TRUE(grant) << grant.error().message;
  EXPECT_EQ(grant->Mechanism(Capability::kProcessTree), "process_group");
  bool said_why = false;
  for (const auto& d : grant->degraded) {
    said_why |= d.capability == Capability::kProcessTree &&
                d.reason.find("setting up the grant's cgroup failed") != std::string::npos;
  }
  EXPECT_TRUE(said_why);
  const auto records = store_->ListGrants(true).value();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].id, grant->id);
  EXPECT_FALSE(records[0].cgroups.contains("v2")) << records[0].cgroups;
  EXPECT_EQ(records[0].mechanisms["process_tree"], "process_group");
  EXPECT_FALSE(std::filesystem::exists(missing));
  EXPECT_FALSE(grant->cgroups);  // the tree was its only group
}

TEST_F(GrantTest, IsolationIsDegradedWhereTheHostCannotIsolateAndRefusedWhenRequired) {
  spec_.isolation.level = Isolation::kStandard;
  auto grant = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_TRUE(grant) << grant.error().message;
  for (Capability c : kIsolationCapabilities) {
    if (c == Capability::kPrivileges) continue;  // no_new_privs holds without namespaces
    bool degraded = false;
    for (const auto& d : grant->degraded) degraded |= d.capability == c && !d.reason.empty();
    EXPECT_TRUE(degraded) << CapabilityName(c);
  }
  spec_.required = {Capability::kFilesystem};
  auto refused = Acquire(spec_, NoCgroupProbe(), *store_);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, AdmitError::Kind::kRefused);
  EXPECT_EQ(refused.error().missing[0].capability, Capability::kFilesystem);
}

// --require network with --network host: nothing sets the capability up,
// so it is refused, not reported enforced; so is a limit never given.
TEST_F(GrantTest, ARequiredCapabilityNothingSetsUpIsRefused) {
  Probe p = NamespacedProbe();
  spec_.isolation.level = Isolation::kStandard;
  spec_.isolation.network = Network::kHost;
  spec_.required = {Capability::kNetwork, Capability::kOpenFiles};
  auto refused = Acquire(spec_, p, *store_);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, AdmitError::Kind::kRefused);
  ASSERT_EQ(refused.error().missing.size(), 2u);
  EXPECT_NE(refused.error().message.find("network: network host shares the host's network"),
            std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("open_files: no limit asks for it"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(Recorded(), 0u) << "a refused spec was recorded";
  spec_.limits.open_files = 64;
  spec_.required = {Capability::kOpenFiles};
  auto granted = Acquire(spec_, p, *store_);
  ASSERT_TRUE(granted) << granted.error().message;
  EXPECT_TRUE(granted->Enforces(Capability::kOpenFiles));
}

TEST_F(GrantTest, WithoutACgroupThePidNamespaceHoldsTheTree) {
  Probe p = NamespacedProbe();
  p.process_tree_unisolated = ResolveCapabilities(p.cgroups, false).front();
  spec_.isolation.level = Isolation::kStandard;
  auto grant = Acquire(spec_, p, *store_);
  ASSERT_TRUE(grant) << grant.error().message;
  EXPECT_EQ(grant->Mechanism(Capability::kProcessTree), "pid_namespace");
  EXPECT_TRUE(grant->Enforces(Capability::kFilesystem));
  ASSERT_TRUE(grant->isolation);
  EXPECT_EQ(grant->isolation->outside_uid, ::getuid());  // not root: the caller's own id
  // Without isolation there is no namespace to hold it.
  spec_.isolation.level = Isolation::kNone;
  auto plain = Acquire(spec_, p, *store_);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->Mechanism(Capability::kProcessTree), "process_group");
  EXPECT_FALSE(plain->isolation);
}

// Two root supervisors with a state directory each (two daemons, or a
// daemon and the CLI) map their sandboxes into the same outside ids, so a
// sandbox of one must never get the id a sandbox of the other holds.
TEST_F(GrantTest, SandboxesOfTwoStateDirectoriesNeverShareAnOutsideId) {
  const Probe& probe = testing::TestProbe();
  if (!probe.isolation.map_ids) {
    GTEST_SKIP() << "this host maps no ids of its own to sandboxes (not root, or no user "
                    "namespaces)";
  }
  testing::TempDir other_dir;
  auto other = store::Store::Open(other_dir.path());
  ASSERT_TRUE(other) << other.error().message();
  spec_.isolation.level = Isolation::kStandard;
  spec_.permissive = true;
  auto a = Acquire(spec_, probe, *store_);
  auto b = Acquire(spec_, probe, *other);
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(b) << b.error().message;
  for (Grant* g : {&*a, &*b}) {
    ASSERT_TRUE(g->isolation && g->isolation->lease);
    char held[64];
    std::string fd = "/proc/self/fd/" + std::to_string(g->isolation->lease->lock_fd());
    ssize_t n = ::readlink(fd.c_str(), held, sizeof held);
    ASSERT_GT(n, 0);
    EXPECT_EQ(
        std::string(held, static_cast<size_t>(n)),
        std::string(kHostIdLeaseDir) + "/" + std::to_string(g->isolation->outside_uid) + ".lock");
    if (g->cgroups) {
      EXPECT_TRUE(g->cgroups->Remove());
    }
  }
  EXPECT_NE(a->isolation->outside_uid, b->isolation->outside_uid);
}

TEST(GrantIdTest, IsARandomUuid) {
  std::string a = NewGrantId(), b = NewGrantId();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[14], '4');
  EXPECT_EQ(a[8], '-');
}

}  // namespace
}  // namespace cordon::contain
