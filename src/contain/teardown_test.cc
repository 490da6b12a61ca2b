#include "contain/teardown.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "contain/launch.h"
#include "support.h"
#include "sys/epoll_reactor.h"

namespace cordon::contain {
namespace {

// Forwards to the kernel and records every signal it sends. With
// `no_cgroup_kill`, writing cgroup.kill fails as where the file is missing
// (Linux before 5.14), and is not forwarded.
class RecordingSignaller final : public Signaller {
 public:
  explicit RecordingSignaller(bool no_cgroup_kill = false) : no_cgroup_kill_(no_cgroup_kill) {}
  sys::Result<void> Signal(const sys::PidFd& process, int sig) override {
    signals.emplace_back(process.pid(), sig);
    return kernel_.Signal(process, sig);
  }
  sys::Result<void> KillCgroup(const CgroupDir& group) override {
    ++cgroup_kills;
    if (no_cgroup_kill_) return sys::Fail(group.path() + "/cgroup.kill: no such file", ENOENT);
    return kernel_.KillCgroup(group);
  }
  sys::Result<void> FreezeCgroup(const CgroupDir& group, bool frozen) override {
    freezes.push_back(frozen);
    return kernel_.FreezeCgroup(group, frozen);
  }
  std::vector<std::pair<pid_t, int>> signals;
  int cgroup_kills = 0;
  std::vector<bool> freezes;  // true: frozen, false: thawed

 private:
  bool no_cgroup_kill_;

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

// Without an atomic kill (a group frozen, or killed member by member), the
// members that ignored SIGTERM, and were pinned for it, get SIGKILL too.
TEST_F(CgroupTeardownTest, WithoutCgroupKillMembersThatIgnoreSigtermAreKilledToo) {
  for (GroupKill kill : {GroupKill::kFreezeKill, GroupKill::kEach}) {
    if (kill == GroupKill::kFreezeKill && !cgroups_->v2()->Has("cgroup.freeze")) continue;
    // sleep inherits the ignored SIGTERM.
    Launched main = Start("trap '' TERM; sleep 60 & sleep 60 & echo ready; wait");
    CgroupTree tree(*cgroups_->v2(), true, nullptr, kill);
    RecordingSignaller signaller;
    Release r = RunTeardown(tree, signaller, TeardownMode::kGraceful,
                            {std::chrono::milliseconds(200), std::chrono::seconds(10)});
    EXPECT_TRUE(r.dead) << GroupKillName(kill) << ": " << r.problem;
    EXPECT_TRUE(r.escalated);
    EXPECT_EQ(r.teardown, GroupKillName(kill));
    EXPECT_EQ(signaller.cgroup_kills, 0);
    int kills = 0;
    for (auto [pid, sig] : signaller.signals) kills += sig == SIGKILL;
    EXPECT_EQ(kills, 3) << GroupKillName(kill);
    EXPECT_TRUE(tree.Members()->empty());
    auto exit = main.pidfd.Reap();
    ASSERT_TRUE(exit);
    EXPECT_TRUE(exit->signaled);
    EXPECT_EQ(exit->status, SIGKILL);
  }
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

// Without cgroup.kill (Linux 5.10): a group frozen, then each member
// killed. The tree fights back: hopping chains (each process forks its
// successor and exits at once, so no pid lives long enough to be signalled
// twice) and, where a process limit bounds it, a breeder forking until the
// limit refuses, again and again.
class FreezeTeardownTest : public ::testing::Test {
 protected:
  static constexpr int64_t kPids = 64;

  void SetUp() override {
    const Probe& probe = testing::TestProbe();
    if (probe.cgroups.v2_parent.empty()) {
      GTEST_SKIP() << "no usable cgroup v2 here: " << probe.cgroups.v2_problem;
    }
    CgroupLimits limits{.tree = true};
    // A bound for the breeder, v2 or v1 (this machine's v2 tree has no
    // controllers); without one there is no breeder.
    bounded_ = probe.Status(Capability::kProcessCount).enforceable &&
               probe.Status(Capability::kProcessCount).mechanism != "rlimit";
    if (bounded_) limits.pids = kPids;
    auto g = GrantCgroups::Create(probe.cgroups, NewGrantName(), limits);
    ASSERT_TRUE(g) << g.error().message();
    cgroups_.emplace(std::move(*g));
    if (!cgroups_->v2()->Has("cgroup.freeze")) {
      GTEST_SKIP() << "cgroup v2 here has no cgroup.freeze (needs Linux 5.2)";
    }
  }
  void TearDown() override {
    if (!cgroups_) return;
    KernelSignaller kernel;
    CgroupTree tree(*cgroups_->v2(), true, nullptr, GroupKill::kFreezeKill);
    RunTeardown(tree, kernel, TeardownMode::kImmediate, {});
    if (root_) {
      (void)root_->SendSignal(SIGKILL);  // dead already, unless a test failed
      (void)root_->Reap();
    }
    EXPECT_TRUE(cgroups_->Remove());
  }
  static std::string NewGrantName() {
    static int n = 0;
    return "freeze-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
  }

  // The tree's root, a child of this test in the group (and with
  // `pid_namespace` the init of a new pid namespace). It and all it forks
  // run only async-signal-safe code.
  void StartTree(bool pid_namespace) {
    int ready[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    std::vector<int> join;
    for (const auto& fd : cgroups_->join_fds()) join.push_back(fd.get());
    bool breed = bounded_;
    int pidfd = -1;
    struct clone_args args {};
    args.flags = CLONE_PIDFD | CLONE_INTO_CGROUP | (pid_namespace ? CLONE_NEWPID : 0);
    args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<uint64_t>(cgroups_->v2()->fd());
    long pid = ::syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) {
      for (int fd : join) (void)!::write(fd, "0", 1);  // the v1 pids group
      // Orphans come here and are reaped at once: no zombie holds a pid.
      ::prctl(PR_SET_CHILD_SUBREAPER, 1);
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ::sigaction(SIGCHLD, &ignore, nullptr);
      for (int i = 0; i < 4; ++i) {
        if (::fork() == 0) {
          for (;;) {
            if (::fork() > 0) ::_exit(0);  // the successor goes on; a failed fork retries
          }
        }
      }
      if (breed && ::fork() == 0) {
        for (;;) {
          if (::fork() == 0) {
            for (;;) ::pause();
          }
        }
      }
      (void)!::write(ready[1], "r", 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    ASSERT_GT(pid, 0) << "clone3: " << errno;
    root_.emplace(sys::UniqueFd(pidfd), static_cast<pid_t>(pid));
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    // The breeder reaches its limit (or at least a crowd): members to kill.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    size_t want = bounded_ ? static_cast<size_t>(kPids) / 2 : 5;
    while (std::chrono::steady_clock::now() < deadline &&
           cgroups_->v2()->Procs().value_or(std::vector<pid_t>{}).size() < want) {
      ::usleep(1000);  // the tree grows by itself; there is no event to wait on
    }
  }

  bool bounded_ = false;
  std::optional<GrantCgroups> cgroups_;
  std::optional<sys::PidFd> root_;
};

TEST_F(FreezeTeardownTest, AForkingTreeIsFrozenKilledAndVerifiedWithoutCgroupKill) {
  StartTree(/*pid_namespace=*/false);
  CgroupTree tree(*cgroups_->v2(), true, nullptr, GroupKill::kFreezeKill);
  EXPECT_EQ(tree.teardown(), "cgroup.freeze+kill");
  ASSERT_FALSE(tree.Members()->empty());
  RecordingSignaller signaller;
  Release r = RunTeardown(tree, signaller, TeardownMode::kImmediate,
                          {std::chrono::milliseconds(0), std::chrono::seconds(20)});
  EXPECT_TRUE(r.dead) << r.problem;
  EXPECT_TRUE(r.survivors.empty());
  EXPECT_EQ(r.method, "cgroup2");
  EXPECT_EQ(r.teardown, "cgroup.freeze+kill");
  EXPECT_EQ(ToJson(r)["teardown"], "cgroup.freeze+kill");
  EXPECT_EQ(signaller.cgroup_kills, 0);                            // cgroup.kill was never written
  EXPECT_EQ(signaller.freezes, (std::vector<bool>{true, false}));  // frozen, then thawed
  EXPECT_FALSE(signaller.signals.empty());
  for (auto [pid, sig] : signaller.signals) EXPECT_EQ(sig, SIGKILL);
  // Verified, not assumed: nothing listed, "populated 0", and thawed.
  EXPECT_TRUE(tree.Members()->empty());
  EXPECT_EQ(cgroups_->v2()->ReadKey("cgroup.events", "populated").value(), 0u);
  EXPECT_EQ(cgroups_->v2()->ReadKey("cgroup.events", "frozen").value(), 0u);
  EXPECT_EQ(cgroups_->v2()->Read("cgroup.freeze").value(), "0\n");
  EXPECT_TRUE(root_->HasExited());
}

TEST_F(FreezeTeardownTest, AfterTheGraceTheTreeIsFrozenAndKilled) {
  StartTree(false);
  CgroupTree tree(*cgroups_->v2(), true, nullptr, GroupKill::kFreezeKill);
  RecordingSignaller signaller;
  // The root ignores nothing, but the chains hop faster than SIGTERM finds
  // them; the breeder's children wait for it: escalation is likely, death
  // is certain.
  Release r = RunTeardown(tree, signaller, TeardownMode::kGraceful,
                          {std::chrono::milliseconds(100), std::chrono::seconds(20)});
  EXPECT_TRUE(r.dead) << r.problem;
  EXPECT_EQ(signaller.cgroup_kills, 0);
  if (r.escalated) {
    EXPECT_EQ(signaller.freezes, (std::vector<bool>{true, false}));
  }
  EXPECT_EQ(cgroups_->v2()->ReadKey("cgroup.events", "populated").value(), 0u);
}

TEST_F(FreezeTeardownTest, WhereCgroupKillCannotBeWrittenTheTeardownFreezesInstead) {
  StartTree(false);
  CgroupTree tree(*cgroups_->v2(), true);  // as the group's files say: cgroup.kill here
  RecordingSignaller signaller(/*no_cgroup_kill=*/true);
  Release r = RunTeardown(tree, signaller, TeardownMode::kImmediate,
                          {std::chrono::milliseconds(0), std::chrono::seconds(20)});
  EXPECT_TRUE(r.dead) << r.problem;
  EXPECT_EQ(signaller.cgroup_kills, 1);  // tried once, refused
  EXPECT_EQ(r.teardown, "cgroup.freeze+kill");
  EXPECT_EQ(signaller.freezes, (std::vector<bool>{true, false}));
  EXPECT_EQ(cgroups_->v2()->ReadKey("cgroup.events", "populated").value(), 0u);
}

TEST_F(FreezeTeardownTest, APidNamespaceDiesWithItsInitWithoutCgroupKill) {
  StartTree(/*pid_namespace=*/true);
  CgroupTree tree(*cgroups_->v2(), true, &*root_, GroupKill::kFreezeKill);
  EXPECT_EQ(tree.teardown(), "pid_namespace");
  RecordingSignaller signaller;
  Release r = RunTeardown(tree, signaller, TeardownMode::kImmediate,
                          {std::chrono::milliseconds(0), std::chrono::seconds(20)});
  EXPECT_TRUE(r.dead) << r.problem;
  EXPECT_EQ(r.teardown, "pid_namespace");
  EXPECT_EQ(signaller.cgroup_kills, 0);
  ASSERT_FALSE(signaller.signals.empty());
  EXPECT_EQ(signaller.signals.front(), std::make_pair(root_->pid(), SIGKILL));  // the init first
  EXPECT_TRUE(root_->HasExited());  // the namespace is gone: its init's exit completed
  EXPECT_EQ(cgroups_->v2()->ReadKey("cgroup.events", "populated").value(), 0u);
  EXPECT_EQ(cgroups_->v2()->Read("cgroup.freeze").value(), "0\n");
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

TEST(ProcessGroupTeardownTest, MembersThatIgnoreSigtermGetSigkillAfterTheGrace) {
  LaunchRequest req;
  req.argv = {"/bin/sh", "-c", "trap '' TERM; sleep 60 & sleep 60 & echo ready; wait"};
  auto launched = Launch(req);
  ASSERT_TRUE(launched);
  (void)sys::SetNonBlocking(launched->stdout_read.get(), false);
  char c;
  ASSERT_EQ(::read(launched->stdout_read.get(), &c, 1), 1);
  ProcessGroupTree tree(launched->pgid, launched->identity.pid, launched->identity.start_ticks);
  RecordingSignaller signaller;
  Release r = RunTeardown(tree, signaller, TeardownMode::kGraceful,
                          {std::chrono::milliseconds(200), std::chrono::seconds(10)});
  EXPECT_TRUE(r.dead) << r.problem;
  EXPECT_TRUE(r.escalated);
  int kills = 0;
  for (auto [pid, sig] : signaller.signals) kills += sig == SIGKILL;
  EXPECT_EQ(kills, 3);
  (void)launched->pidfd.Reap();
}

// Forwards to another reactor; WakeAll calls every watched handler once,
// readable or not: the spurious wake-up sys::Reactor allows (the daemon's
// Asio loop gives one when a descriptor's state is recycled).
class SpuriousReactor final : public sys::Reactor {
 public:
  explicit SpuriousReactor(sys::Reactor& inner) : inner_(inner) {}
  sys::Result<void> Watch(int fd, Handler on_readable) override {
    auto handler = std::make_shared<Handler>(std::move(on_readable));
    auto watched = inner_.Watch(fd, [handler] { (*handler)(); });
    if (watched) handlers_[fd] = handler;
    return watched;
  }
  void Unwatch(int fd) override {
    inner_.Unwatch(fd);
    handlers_.erase(fd);
  }
  void WakeAll() {
    auto handlers = handlers_;  // handlers watch and unwatch
    for (auto& [fd, handler] : handlers) {
      auto it = handlers_.find(fd);
      if (it != handlers_.end() && it->second == handler) (*handler)();
    }
  }

 private:
  sys::Reactor& inner_;
  std::map<int, std::shared_ptr<Handler>> handlers_;
};

// A wake-up of the verify timer before it fired is not its deadline: the
// teardown waits on, and sees the tree die (found as `cordon mcp` stopping
// right after a run: a session quarantined "20000 ms after SIGKILL" 30 ms
// after it).
TEST(ProcessGroupTeardownTest, ASpuriousWakeUpIsNotTheVerifyDeadline) {
  LaunchRequest req;
  req.argv = {"/bin/sh", "-c", "sleep 60 & echo ready; wait"};
  auto launched = Launch(req);
  ASSERT_TRUE(launched);
  (void)sys::SetNonBlocking(launched->stdout_read.get(), false);
  char c;
  ASSERT_EQ(::read(launched->stdout_read.get(), &c, 1), 1);
  ProcessGroupTree tree(launched->pgid, launched->identity.pid, launched->identity.start_ticks);
  auto members = tree.Members();
  ASSERT_TRUE(members);
  ASSERT_EQ(members->size(), 2u);
  auto epoll = sys::EpollReactor::Create();
  ASSERT_TRUE(epoll);
  SpuriousReactor reactor(*epoll);
  InertSignaller inert;  // the teardown's SIGKILLs do nothing: the test kills
  auto teardown = Teardown::Create(reactor, tree, inert,
                                   {std::chrono::milliseconds(0), std::chrono::seconds(60)});
  ASSERT_TRUE(teardown);
  std::optional<Release> release;
  (*teardown)->Start(TeardownMode::kImmediate, [&](const Release& r) { release = r; });
  ASSERT_FALSE(release.has_value()) << release->problem;
  reactor.WakeAll();
  EXPECT_FALSE(release.has_value())
      << "a spurious wake-up ended the teardown: " << release->problem;
  KernelSignaller kernel;
  for (pid_t pid : *members) {
    if (auto fd = sys::PidFd::Open(pid)) (void)kernel.Signal(*fd, SIGKILL);
  }
  if (!release) {
    ASSERT_TRUE(epoll->RunUntil([&] { return release.has_value(); }));
    EXPECT_TRUE(release->dead) << release->problem;
  }
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
