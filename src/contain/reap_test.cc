#include "contain/reap.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "contain/grant.h"
#include "contain/launch.h"
#include "support.h"

namespace cordon::contain {
namespace {

// The identity of a process that has exited and been reaped: a supervisor
// that is gone.
proc::Identity DeadSupervisor() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  proc::Identity id = proc::ReadIdentity(pid).value();  // a zombie still has its stat
  ::waitpid(pid, nullptr, 0);
  return id;
}

pid_t ForkSleeper(bool new_session) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (new_session) ::setsid();
    ::pause();
    ::_exit(0);
  }
  return pid;
}

class ReapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::Store::Open(dir_.path());
    ASSERT_TRUE(s);
    store_.emplace(std::move(*s));
  }
  store::GrantRecord Orphan(const std::string& id) {
    store::GrantRecord g;
    g.id = id;
    g.owner = "test";
    g.spec = {{"argv", {"x"}}};
    g.supervisor = DeadSupervisor();
    g.created_at_ms = store::NowMs();
    return g;
  }
  std::vector<ReapReport> Reap() {
    KernelSignaller kernel;
    auto reports = contain::Reap(*store_, kernel, {});
    EXPECT_TRUE(reports) << reports.error().message();
    return reports.value_or(std::vector<ReapReport>{});
  }
  std::string State(const std::string& id) { return store_->GetGrant(id).value()->state; }

  testing::TempDir dir_;
  std::optional<store::Store> store_;
};

TEST_F(ReapTest, ARecycledPidIsNeverSignalledButTheGrantIsReleased) {
  pid_t stranger = ForkSleeper(true);  // now holds the grant's old pid number
  auto id = proc::ReadIdentity(stranger);
  ASSERT_TRUE(id);
  store::GrantRecord g = Orphan("recycled");
  g.identity = *id;
  g.identity->start_ticks -= 1;  // the grant's process started at another time
  g.pgid = stranger;
  ASSERT_TRUE(store_->InsertGrant(g));
  ASSERT_TRUE(store_->RecordStart(g.id, *g.identity, stranger));

  auto reports = Reap();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].action, "gone");
  EXPECT_NE(reports[0].note.find("pid_reused"), std::string::npos);
  EXPECT_FALSE(testing::Exited(stranger));  // not signalled
  EXPECT_EQ(State("recycled"), "released");
  ::kill(stranger, SIGKILL);
  ::waitpid(stranger, nullptr, 0);
}

TEST_F(ReapTest, AnOrphanedTreeIsKilledThroughItsCgroup) {
  const Probe& probe = testing::TestProbe();
  if (!probe.Status(Capability::kProcessTree).enforceable) {
    GTEST_SKIP() << "no cgroup v2 here: " << probe.Status(Capability::kProcessTree).reason;
  }
  auto cgroups = GrantCgroups::Create(probe.cgroups, NewGrantId(), {.tree = true});
  ASSERT_TRUE(cgroups);
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "setsid sleep 60 & sleep 60 & echo ready; wait"};
  r.cgroups = &*cgroups;
  auto launched = Launch(r);
  ASSERT_TRUE(launched);
  (void)sys::SetNonBlocking(launched->stdout_read.get(), false);
  char c;
  ASSERT_EQ(::read(launched->stdout_read.get(), &c, 1), 1);
  std::vector<pid_t> members = cgroups->v2()->Procs().value();
  ASSERT_EQ(members.size(), 3u);

  store::GrantRecord g = Orphan("orphan");
  g.cgroups = {{"v2", cgroups->v2()->path()}};
  g.identity = launched->identity;
  g.pgid = launched->pgid;
  ASSERT_TRUE(store_->InsertGrant(g));
  ASSERT_TRUE(store_->RecordStart(g.id, *g.identity, *g.pgid));

  auto reports = Reap();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].action, "reaped");
  EXPECT_TRUE(reports[0].release.dead);
  EXPECT_EQ(reports[0].release.method, "cgroup2");
  for (pid_t pid : members) EXPECT_TRUE(testing::Exited(pid)) << pid;
  EXPECT_FALSE(std::filesystem::exists(g.cgroups["v2"].get<std::string>()));
  EXPECT_EQ(State("orphan"), "released");
  auto record = store_->GetGrant("orphan").value();
  EXPECT_EQ(record->outcome, "cancelled");
  EXPECT_EQ(record->release["reaped"], true);
  (void)launched->pidfd.Reap();
  EXPECT_TRUE(Reap().empty());  // nothing left to do
}

// Writing cgroup.kill fails as on Linux before 5.14 (no such file); the
// rest goes to the kernel, and freezes are counted.
class NoCgroupKillSignaller final : public Signaller {
 public:
  sys::Result<void> Signal(const sys::PidFd& process, int sig) override {
    return kernel_.Signal(process, sig);
  }
  sys::Result<void> KillCgroup(const CgroupDir& group) override {
    return sys::Fail(group.path() + "/cgroup.kill: no such file", ENOENT);
  }
  sys::Result<void> FreezeCgroup(const CgroupDir& group, bool frozen) override {
    freezes.push_back(frozen);
    return kernel_.FreezeCgroup(group, frozen);
  }
  std::vector<bool> freezes;

 private:
  KernelSignaller kernel_;
};

TEST_F(ReapTest, WithoutCgroupKillAnOrphanedTreeIsFrozenKilledAndVerified) {
  const Probe& probe = testing::TestProbe();
  if (probe.cgroups.v2_parent.empty()) {
    GTEST_SKIP() << "no cgroup v2 here: " << probe.cgroups.v2_problem;
  }
  auto cgroups = GrantCgroups::Create(probe.cgroups, NewGrantId(), {.tree = true});
  ASSERT_TRUE(cgroups);
  if (!cgroups->v2()->Has("cgroup.freeze")) {
    EXPECT_TRUE(cgroups->Remove());
    GTEST_SKIP() << "no cgroup.freeze here (needs Linux 5.2)";
  }
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "setsid sleep 60 & sleep 60 & echo ready; wait"};
  r.cgroups = &*cgroups;
  auto launched = Launch(r);
  ASSERT_TRUE(launched);
  (void)sys::SetNonBlocking(launched->stdout_read.get(), false);
  char c;
  ASSERT_EQ(::read(launched->stdout_read.get(), &c, 1), 1);
  std::vector<pid_t> members = cgroups->v2()->Procs().value();
  ASSERT_EQ(members.size(), 3u);

  store::GrantRecord g = Orphan("orphan-5.10");
  g.cgroups = {{"v2", cgroups->v2()->path()}};
  g.identity = launched->identity;
  g.pgid = launched->pgid;
  ASSERT_TRUE(store_->InsertGrant(g));
  ASSERT_TRUE(store_->RecordStart(g.id, *g.identity, *g.pgid));

  NoCgroupKillSignaller signaller;
  auto reports = contain::Reap(*store_, signaller, {});
  ASSERT_TRUE(reports) << reports.error().message();
  ASSERT_EQ(reports->size(), 1u);
  const ReapReport& report = (*reports)[0];
  EXPECT_EQ(report.action, "reaped") << report.release.problem;
  EXPECT_TRUE(report.release.dead);
  EXPECT_EQ(report.release.teardown, "cgroup.freeze+kill");
  EXPECT_EQ(signaller.freezes, (std::vector<bool>{true, false}));
  for (pid_t pid : members) EXPECT_TRUE(testing::Exited(pid)) << pid;
  EXPECT_FALSE(std::filesystem::exists(g.cgroups["v2"].get<std::string>()));
  EXPECT_EQ(State("orphan-5.10"), "released");
  EXPECT_EQ(store_->GetGrant("orphan-5.10").value()->release["teardown"], "cgroup.freeze+kill");
  (void)launched->pidfd.Reap();
}

TEST_F(ReapTest, AnOrphanedProcessGroupIsKilledWhenItsLeaderStillMatches) {
  pid_t leader = ForkSleeper(true);
  auto id = proc::ReadIdentity(leader);
  ASSERT_TRUE(id);
  store::GrantRecord g = Orphan("pgroup");
  g.identity = *id;
  g.pgid = leader;
  ASSERT_TRUE(store_->InsertGrant(g));
  ASSERT_TRUE(store_->RecordStart(g.id, *id, leader));
  auto reports = Reap();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].action, "reaped");
  EXPECT_EQ(reports[0].release.method, "process_group");
  EXPECT_TRUE(testing::Exited(leader));
  ::waitpid(leader, nullptr, 0);
}

// Acquire records a grant, with where its groups will be, before it makes
// them: a supervisor killed after the record leaves groups that are empty,
// or none at all. Reap removes the first and releases both.
TEST_F(ReapTest, AGrantWhoseSupervisorDiedBeforeItsProcessIsReleasedAndItsGroupsGo) {
  const Probe& probe = testing::TestProbe();
  if (!probe.Status(Capability::kProcessTree).enforceable) {
    GTEST_SKIP() << "no cgroup v2 here: " << probe.Status(Capability::kProcessTree).reason;
  }
  const CgroupLimits limits{.tree = true, .pids = 16};
  auto record = [&](const std::string& id) {
    auto paths = GrantCgroups::Paths(probe.cgroups, id, limits);
    EXPECT_TRUE(paths) << paths.error().message();
    store::GrantRecord g = Orphan(id);
    g.cgroups = ToJson(*paths);
    EXPECT_TRUE(store_->InsertGrant(g));
    return *paths;
  };
  const std::string made_id = NewGrantId(), unmade_id = NewGrantId();
  const CgroupPaths made = record(made_id);
  ASSERT_TRUE(GrantCgroups::Create(probe.cgroups, made_id, limits));  // left behind
  const CgroupPaths unmade = record(unmade_id);
  ASSERT_TRUE(std::filesystem::exists(made.v2));

  auto reports = Reap();
  ASSERT_EQ(reports.size(), 2u);
  for (const auto& r : reports) {
    EXPECT_TRUE(r.release.dead) << r.grant_id;
    EXPECT_EQ(r.action, r.grant_id == made_id ? "reaped" : "gone") << r.note;
  }
  for (const auto& path : {made.v2, made.pids, unmade.v2, unmade.pids}) {
    if (!path.empty()) {
      EXPECT_FALSE(std::filesystem::exists(path)) << path;
    }
  }
  EXPECT_EQ(State(made_id), "released");
  EXPECT_EQ(State(unmade_id), "released");
}

TEST_F(ReapTest, AGrantWhoseSupervisorLivesIsLeftAlone) {
  store::GrantRecord g = Orphan("mine");
  g.supervisor = proc::ReadIdentity(::getpid()).value();
  ASSERT_TRUE(store_->InsertGrant(g));
  EXPECT_TRUE(Reap().empty());
  EXPECT_EQ(State("mine"), "active");
}

TEST_F(ReapTest, AGrantFromAnotherBootIsGone) {
  store::GrantRecord g = Orphan("old-boot");
  g.supervisor.boot_id = "00000000-0000-0000-0000-000000000000";
  g.identity = proc::Identity{::getpid(), 1, 1, g.supervisor.boot_id};  // must not be touched
  g.pgid = ::getpgrp();
  ASSERT_TRUE(store_->InsertGrant(g));
  auto reports = Reap();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].action, "gone");
  EXPECT_EQ(reports[0].release.method, "reboot");
  EXPECT_EQ(State("old-boot"), "released");
}

}  // namespace
}  // namespace cordon::contain
