#include "contain/teardown.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "contain/launch.h"
#include "support.h"
#include "sys/epoll_reactor.h"

namespace cordon::contain {
namespace {

// Forwards to the kernel and records every signal it sends.
class RecordingSignaller final : public Signaller {
 public:
  sys::Result<void> Signal(const sys::PidFd& process, int sig) override {
    signals.emplace_back(process.pid(), sig);
    return kernel_.Signal(process, sig);
  }
  sys::Result<void> KillCgroup(const CgroupDir& group) override {
    ++cgroup_kills;
    return kernel_.KillCgroup(group);
  }
  std::vector<std::pair<pid_t, int>> signals;
  int cgroup_kills = 0;

 private:
  KernelSignaller kernel_;
};

// A signaller whose signals do nothing: teardown can then not kill.
class InertSignaller final : public Signaller {
 public:
  sys::Result<void> Signal(const sys::PidFd&, int) override { return {}; }
  sys::Result<void> KillCgroup(const CgroupDir&) override { return {}; }
};

int OpenFds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

Release RunTeardown(const Tree& tree, Signaller& signaller, TeardownMode mode,
                    TeardownOptions options) {
  auto reactor = sys::EpollReactor::Create();
  EXPECT_TRUE(reactor);
  auto teardown = Teardown::Create(*reactor, tree, signaller, options);
  EXPECT_TRUE(teardown);
  std::optional<Release> release;
  (*teardown)->Start(mode, [&](const Release& r) { release = r; });
  EXPECT_TRUE(reactor->RunUntil([&] { return release.has_value(); }));
  return *release;
}

class CgroupTeardownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::TestProbe().Status(Capability::kProcessTree).enforceable) {
      GTEST_SKIP() << "no usable cgroup v2 here: "
                   << testing::TestProbe().Status(Capability::kProcessTree).reason;
    }
    auto g = GrantCgroups::Create(testing::TestProbe().cgroups, NewGrantName(), {.tree = true});
    ASSERT_TRUE(g) << g.error().message();
    cgroups_.emplace(std::move(*g));
  }
  void TearDown() override {
    if (!cgroups_) return;
    KernelSignaller kernel;
    (void)kernel.KillCgroup(*cgroups_->v2());
    CgroupTree tree(*cgroups_->v2(), true);
    RunTeardown(tree, kernel, TeardownMode::kImmediate, {});
    EXPECT_TRUE(cgroups_->Remove());
  }
  static std::string NewGrantName() {
    static int n = 0;
    return "teardown-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
  }
  // Starts `script` in the group and waits until it printed a line.
  Launched Start(const std::string& script) {
    LaunchRequest r;
    r.argv = {"/bin/sh", "-c", script};
    r.cgroups = &*cgroups_;
    auto launched = Launch(r);
    EXPECT_TRUE(launched) << launched.error().message();
    (void)sys::SetNonBlocking(launched->stdout_read.get(), false);
    char c;
    EXPECT_EQ(::read(launched->stdout_read.get(), &c, 1), 1);  // "ready"
    return std::move(*launched);
  }
  std::optional<GrantCgroups> cgroups_;
};

TEST_F(CgroupTeardownTest, ACooperativeTreeDiesOnSigtermWithinTheGrace) {
  Launched main = Start("sleep 60 & sleep 60 & echo ready; wait");
  CgroupTree tree(*cgroups_->v2(), true);
  auto before = tree.Members();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->size(), 3u);
  RecordingSignaller signaller;
  int fds = OpenFds();
  Release r = RunTeardown(tree, signaller, TeardownMode::kGraceful,
                          {std::chrono::seconds(20), std::chrono::seconds(10)});
  EXPECT_EQ(OpenFds(), fds);  // every pidfd it pinned was closed
  EXPECT_TRUE(r.dead);
  EXPECT_FALSE(r.escalated);
  EXPECT_EQ(r.method, "cgroup2");
  EXPECT_TRUE(r.survivors.empty());
  EXPECT_EQ(signaller.cgroup_kills, 0);
  EXPECT_LT(r.duration, std::chrono::seconds(20));  // did not wait out the grace
  for (auto [pid, sig] : signaller.signals) EXPECT_EQ(sig, SIGTERM);
  // Verified, not assumed: the group is empty and the leader is gone.
  EXPECT_TRUE(tree.Members()->empty());
  EXPECT_TRUE(main.pidfd.HasExited());
  (void)main.pidfd.Reap();
}

TEST_F(CgroupTeardownTest, ATreeThatIgnoresSigtermIsEscalatedToSigkill) {
  Launched main = Start("trap '' TERM; sleep 60 & sleep 60 & echo ready; wait");
  CgroupTree tree(*cgroups_->v2(), true);
  RecordingSignaller signaller;
  Release r = RunTeardown(tree, signaller, TeardownMode::kGraceful,
                          {std::chrono::milliseconds(200), std::chrono::seconds(10)});
  EXPECT_TRUE(r.dead);
  EXPECT_TRUE(r.escalated);
  EXPECT_EQ(signaller.cgroup_kills, 1);
  EXPECT_GE(r.duration, std::chrono::milliseconds(200));
  EXPECT_TRUE(tree.Members()->empty());
  auto exit = main.pidfd.Reap();
  ASSERT_TRUE(exit);
  EXPECT_TRUE(exit->signaled);
  EXPECT_EQ(exit->status, SIGKILL);
}

TEST_F(CgroupTeardownTest, WhenSignalsDoNothingDeathIsNotClaimed) {
  Launched main = Start("sleep 60 & echo ready; wait");
  CgroupTree tree(*cgroups_->v2(), true);
  auto members = tree.Members();
  ASSERT_TRUE(members);
  InertSignaller inert;
  Release r = RunTeardown(tree, inert, TeardownMode::kGraceful,
                          {std::chrono::milliseconds(50), std::chrono::milliseconds(200)});
  EXPECT_FALSE(r.dead);
  EXPECT_TRUE(r.escalated);
  EXPECT_FALSE(r.problem.empty());
  std::sort(members->begin(), members->end());
  std::sort(r.survivors.begin(), r.survivors.end());
  EXPECT_EQ(r.survivors, *members);
  EXPECT_FALSE(main.pidfd.HasExited());
}

// A pid namespace's init leaves its cgroup (cgroup.procs, and "populated")
// as its exit begins, then waits inside that exit until every other process
// of the namespace has been reaped. Here the one other process is a zombie
// whose parent, outside the namespace, is this test: until the test reaps
// it, the init has not ended, and the teardown must not say it has.
TEST_F(CgroupTeardownTest, AnInitStillInItsExitIsNotDeadUntilItsPidfdSignals) {
  int init_pidfd = -1;
  struct clone_args args {};
  args.flags = CLONE_PIDFD | CLONE_NEWPID | CLONE_INTO_CGROUP;
  args.pidfd = reinterpret_cast<uint64_t>(&init_pidfd);
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgroups_->v2()->fd());
  long init = ::syscall(SYS_clone3, &args, sizeof args);
  if (init == 0) {
    for (;;) ::pause();
  }
  if (init < 0) GTEST_SKIP() << "clone3(CLONE_NEWPID | CLONE_INTO_CGROUP): " << errno;
  sys::PidFd init_fd(sys::UniqueFd(init_pidfd), static_cast<pid_t>(init));
  // A child of this test, born inside the namespace, that exits at once.
  sys::UniqueFd own_ns(::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(own_ns);
  ASSERT_EQ(::setns(init_fd.fd(), CLONE_NEWPID), 0) << errno;
  pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  ASSERT_EQ(::setns(own_ns.get(), CLONE_NEWPID), 0) << errno;
  ASSERT_GT(zombie, 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, zombie, &info, WEXITED | WNOWAIT), 0);  // exited, not reaped

  CgroupTree tree(*cgroups_->v2(), true, &init_fd);
  KernelSignaller kernel;
  Release held = RunTeardown(tree, kernel, TeardownMode::kImmediate,
                             {std::chrono::milliseconds(0), std::chrono::milliseconds(300)});
  EXPECT_TRUE(tree.Members()->empty()) << "cgroup.procs no longer lists the exiting init";
  EXPECT_FALSE(held.dead);
  EXPECT_FALSE(held.problem.empty());
  EXPECT_EQ(held.survivors, std::vector<pid_t>{static_cast<pid_t>(init)});
  EXPECT_FALSE(init_fd.HasExited());

  ASSERT_EQ(::waitpid(zombie, nullptr, 0), zombie);  // the init's exit can complete now
  Release r = RunTeardown(tree, kernel, TeardownMode::kImmediate,
                          {std::chrono::milliseconds(0), std::chrono::seconds(10)});
  EXPECT_TRUE(r.dead) << r.problem;
  EXPECT_TRUE(r.survivors.empty());
  EXPECT_TRUE(init_fd.HasExited());
  EXPECT_LT(r.duration, std::chrono::seconds(5));  // woken by the pidfd, not the deadline
  auto exit = init_fd.Reap();
  ASSERT_TRUE(exit);
  EXPECT_TRUE(exit->signaled);
}

TEST(ProcessGroupTeardownTest, KillsEveryMemberOfTheGroup) {
  LaunchRequest req;
  req.argv = {"/bin/sh", "-c", "sleep 60 & sleep 60 & echo ready; wait"};
  auto launched = Launch(req);
  ASSERT_TRUE(launched);
  (void)sys::SetNonBlocking(launched->stdout_read.get(), false);
  char c;
  ASSERT_EQ(::read(launched->stdout_read.get(), &c, 1), 1);
  ProcessGroupTree tree(launched->pgid, launched->identity.pid, launched->identity.start_ticks);
  ASSERT_EQ(tree.Members()->size(), 3u);
  RecordingSignaller signaller;
  Release r = RunTeardown(tree, signaller, TeardownMode::kImmediate, {});
  EXPECT_TRUE(r.dead);
  EXPECT_EQ(r.method, "process_group");
  EXPECT_EQ(signaller.signals.size(), 3u);
  for (auto [pid, sig] : signaller.signals) EXPECT_EQ(sig, SIGKILL);
  (void)launched->pidfd.Reap();
}

TEST(ProcessGroupTeardownTest, NeverSignalsTheSupervisorsOwnProcessGroup) {
  // A child that stayed in our process group, and a sibling in it too.
  pid_t leader = ::fork();
  ASSERT_GE(leader, 0);
  if (leader == 0) {
    ::pause();
    ::_exit(0);
  }
  pid_t sibling = ::fork();
  ASSERT_GE(sibling, 0);
  if (sibling == 0) {
    ::pause();
    ::_exit(0);
  }
  auto id = proc::ReadIdentity(leader);
  ASSERT_TRUE(id);
  // Fed our own pgid, the tree is the leader alone.
  ProcessGroupTree tree(::getpgrp(), leader, id->start_ticks);
  EXPECT_EQ(*tree.Members(), std::vector<pid_t>{leader});
  RecordingSignaller signaller;
  Release r = RunTeardown(tree, signaller, TeardownMode::kGraceful,
                          {std::chrono::seconds(5), std::chrono::seconds(5)});
  EXPECT_TRUE(r.dead);
  ASSERT_FALSE(signaller.signals.empty());
  for (auto [pid, sig] : signaller.signals) EXPECT_EQ(pid, leader);
  EXPECT_FALSE(testing::Exited(sibling));
  EXPECT_FALSE(testing::Exited(::getpid()));
  ::kill(sibling, SIGKILL);
  ::waitpid(sibling, nullptr, 0);
  ::waitpid(leader, nullptr, 0);
}

TEST(ProcessGroupTreeTest, ARecycledLeaderPidIsNotAMember) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto id = proc::ReadIdentity(child);
  ASSERT_TRUE(id);
  // Pretend the leader we launched started earlier: the live process with
  // that pid is then someone else.
  ProcessGroupTree tree(child, child, id->start_ticks - 1);
  EXPECT_TRUE(tree.Members()->empty());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace cordon::contain
