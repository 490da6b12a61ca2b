#include "contain/launch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "contain/forked_memory.h"
#include "contain/namespaces.h"
#include "contain/pid_init.h"
#include "support.h"

namespace cordon::contain {
namespace {

// Launches and collects stdout/stderr to EOF and the exit.
struct Finished {
  Launched launched;
  std::string out;
  std::string err;
  sys::ChildExit exit;
};

Finished LaunchAndWait(const LaunchRequest& request) {
  auto launched = Launch(request);
  EXPECT_TRUE(launched) << launched.error().message();
  Finished f{std::move(*launched), "", "", {}};
  // Blocking reads are fine here: the child exits, closing both pipes.
  (void)sys::SetNonBlocking(f.launched.stdout_read.get(), false);
  (void)sys::SetNonBlocking(f.launched.stderr_read.get(), false);
  f.out = sys::ReadAll(f.launched.stdout_read.get()).value_or("");
  f.err = sys::ReadAll(f.launched.stderr_read.get()).value_or("");
  f.exit = f.launched.pidfd.Reap().value();
  return f;
}

TEST(LaunchTest, RunsTheProgramWithExactlyTheDeclaredEnvironment) {
  testing::TempDir dir;
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "pwd; env | sort; echo oops >&2; exit 3"};
  r.env = {"B=2", "A=1"};
  r.workspace = dir.path();
  Finished f = LaunchAndWait(r);
  EXPECT_FALSE(f.launched.setup_error);
  EXPECT_FALSE(f.exit.signaled);
  EXPECT_EQ(f.exit.status, 3);
  // sh adds PWD (and may add SHLVL/_); nothing of ours leaks: no HOME, no PATH.
  EXPECT_NE(f.out.find(dir.path() + "\n"), std::string::npos);
  EXPECT_NE(f.out.find("A=1\nB=2\n"), std::string::npos);
  EXPECT_EQ(f.out.find("HOME="), std::string::npos);
  EXPECT_EQ(f.out.find("PATH="), std::string::npos);
  EXPECT_EQ(f.err, "oops\n");
  EXPECT_EQ(f.launched.pgid, f.launched.identity.pid);
  EXPECT_EQ(f.launched.identity.ppid, ::getpid());
}

TEST(LaunchTest, SearchesTheDeclaredPathOrTheDefault) {
  LaunchRequest r;
  r.argv = {"true"};
  EXPECT_EQ(LaunchAndWait(r).exit.status, 0);
  r.env = {"PATH=/nonexistent"};
  Finished f = LaunchAndWait(r);
  ASSERT_TRUE(f.launched.setup_error);
  EXPECT_EQ(f.launched.setup_error->step, SetupStep::kExec);
  EXPECT_EQ(f.launched.setup_error->err, ENOENT);
  EXPECT_EQ(ExecCandidates("ls", "/a::/b"), (std::vector<std::string>{"/a/ls", "ls", "/b/ls"}));
  EXPECT_EQ(ExecCandidates("./x", std::nullopt), (std::vector<std::string>{"./x"}));
}

TEST(LaunchTest, ReportsTheFailingStepAndErrno) {
  LaunchRequest missing;
  missing.argv = {"/nonexistent/program"};
  Finished f = LaunchAndWait(missing);
  ASSERT_TRUE(f.launched.setup_error);
  EXPECT_EQ(SetupStepName(f.launched.setup_error->step), "exec");
  EXPECT_EQ(f.launched.setup_error->err, ENOENT);
  EXPECT_EQ(f.exit.status, 127);

  testing::TempDir dir;
  std::string data = dir / "data";
  ASSERT_TRUE(sys::Open(data, O_WRONLY | O_CREAT, 0644));
  LaunchRequest not_executable;
  not_executable.argv = {data};
  Finished g = LaunchAndWait(not_executable);
  ASSERT_TRUE(g.launched.setup_error);
  EXPECT_EQ(g.launched.setup_error->err, EACCES);

  LaunchRequest bad_rlimit;
  bad_rlimit.argv = {"/bin/true"};
  bad_rlimit.rlimits = {{RLIMIT_NOFILE, 10, 5}};  // soft above hard: EINVAL
  Finished h = LaunchAndWait(bad_rlimit);
  ASSERT_TRUE(h.launched.setup_error);
  EXPECT_EQ(h.launched.setup_error->step, SetupStep::kRlimits);
  EXPECT_EQ(h.launched.setup_error->err, EINVAL);
}

TEST(LaunchTest, FeedsStdinAndAppliesRlimits) {
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "cat; ulimit -n; ulimit -f"};
  r.stdin_bytes = std::string("line one\nline two\n");
  r.rlimits = {{RLIMIT_NOFILE, 42, 42}, {RLIMIT_FSIZE, 8 * 512, 8 * 512}};
  Finished f = LaunchAndWait(r);
  EXPECT_EQ(f.out, "line one\nline two\n42\n8\n");
  LaunchRequest no_stdin;
  no_stdin.argv = {"/bin/cat"};  // /dev/null: EOF at once
  EXPECT_EQ(LaunchAndWait(no_stdin).out, "");
}

TEST(LaunchTest, NothingOfTheSupervisorLeaksIn) {
  // An open descriptor of ours, not close-on-exec, and an ignored signal.
  int leaked = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaked, 3);
  ::signal(SIGUSR1, SIG_IGN);
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "ls /proc/self/fd; grep SigIgn /proc/self/status"};
  Finished f = LaunchAndWait(r);
  ::signal(SIGUSR1, SIG_DFL);
  ::close(leaked);
  // 0, 1, 2 and the one ls opens to read the directory.
  EXPECT_EQ(f.out.substr(0, f.out.find("SigIgn")), "0\n1\n2\n3\n");
  // SIGUSR1 is bit 10: not ignored in the child.
  std::string ignored = f.out.substr(f.out.find("SigIgn:") + 7);
  unsigned long mask = std::stoul(ignored, nullptr, 16);
  EXPECT_EQ(mask & (1ul << (SIGUSR1 - 1)), 0ul);
}

TEST(LaunchTest, ExecutesAnOpenFileNotAPath) {
  testing::TempDir dir;
  std::string script = dir / "hello";
  {
    auto fd = sys::Open(script, O_WRONLY | O_CREAT, 0755);
    ASSERT_TRUE(fd);
    ASSERT_TRUE(sys::WriteAll(fd->get(), "#!/bin/sh\necho \"script $1\"\n"));
  }
  auto opened = sys::Open(script, O_RDONLY);
  ASSERT_TRUE(opened);
  // The path now names something else: the opened file is what runs.
  ASSERT_EQ(::unlink(script.c_str()), 0);
  LaunchRequest r;
  r.argv = {"hello", "arg"};
  r.exec_fd = opened->get();
  r.exec_fd_is_script = true;
  EXPECT_EQ(LaunchAndWait(r).out, "script arg\n");

  auto binary = sys::Open("/bin/echo", O_RDONLY);
  ASSERT_TRUE(binary);
  LaunchRequest b;
  b.argv = {"echo", "from", "fd"};
  b.exec_fd = binary->get();
  EXPECT_EQ(LaunchAndWait(b).out, "from fd\n");
}

TEST(LaunchTest, TheChildLeadsItsOwnSessionAndGroup) {
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "cut -d' ' -f5,6 /proc/self/stat; echo $$"};
  Finished f = LaunchAndWait(r);
  std::string pid = std::to_string(f.launched.identity.pid);
  EXPECT_EQ(f.out, pid + " " + pid + "\n" + pid + "\n");
}

// Where no cgroup holds the tree, only the identity the supervisor records
// finds it again after a crash: nothing of the command runs before that.
TEST(LaunchTest, WithoutACgroupNothingRunsBeforeTheProcessIsRecorded) {
  testing::TempDir dir;
  const std::string marker = dir.path() + "/ran";
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "touch " + marker};
  bool ran_while_recording = true;
  r.on_started = [&](const proc::Identity&, pid_t) {
    // Long enough for the command to have run many times over, had it not
    // waited.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ran_while_recording = std::filesystem::exists(marker);
    return sys::Result<void>{};
  };
  Finished f = LaunchAndWait(r);
  EXPECT_FALSE(f.launched.setup_error);
  EXPECT_FALSE(ran_while_recording);
  EXPECT_TRUE(std::filesystem::exists(marker));
}

// There, a process that cannot be recorded (the store's filesystem full)
// is one nothing could find after a crash: it never runs.
TEST(LaunchTest, WithoutACgroupAProcessThatCannotBeRecordedNeverRuns) {
  testing::TempDir dir;
  const std::string marker = dir.path() + "/ran";
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "touch " + marker};
  pid_t child = 0;
  r.on_started = [&](const proc::Identity& identity, pid_t) -> sys::Result<void> {
    child = identity.pid;
    return sys::Fail("the store is full", ENOSPC);
  };
  auto launched = Launch(r);
  ASSERT_FALSE(launched);
  EXPECT_NE(launched.error().message().find("record the process"), std::string::npos)
      << launched.error().message();
  EXPECT_EQ(launched.error().errno_value(), ENOSPC);
  // Killed and reaped before Launch returned: it cannot run later either.
  ASSERT_GT(child, 0);
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(LaunchTest, WithoutACgroupASupervisorThatDiesBeforeTheRecordLeavesNothingRunning) {
  testing::TempDir dir;
  const std::string marker = dir.path() + "/ran";
  // This process adopts the orphan, so that it can wait for it.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  pid_t supervisor = ::fork();
  ASSERT_GE(supervisor, 0);
  if (supervisor == 0) {
    LaunchRequest r;
    r.argv = {"/bin/sh", "-c", "touch " + marker};
    r.on_started = [&](const proc::Identity& identity, pid_t) {
      (void)!::write(report[1], &identity.pid, sizeof identity.pid);
      ::_exit(0);  // killed before its record is written
      return sys::Result<void>{};
    };
    (void)Launch(r);
    ::_exit(1);
  }
  ::close(report[1]);
  pid_t child = -1;
  ASSERT_EQ(::read(report[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  ::close(report[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(supervisor, &status, 0), supervisor);
  EXPECT_EQ(::waitpid(child, &status, 0), child);  // adopted
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 127);  // gave up at `recorded`
  EXPECT_FALSE(std::filesystem::exists(marker));
}

class SandboxLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NamespaceSupport ns = ProbeNamespaces();
    if (!ns.available) GTEST_SKIP() << ns.problem;
  }
  // A sandbox mapped to the caller's own ids, with this test's workspace.
  Sandbox Make() {
    SandboxRequest r;
    r.spec = &iso_;
    r.workspace = work_.path();
    r.namespaces = true;
    r.seccomp = SeccompAvailable();
    r.landlock_abi = LandlockAbi();
    r.outside_uid = ::getuid();
    r.outside_gid = ::getgid();
    auto s = Sandbox::Prepare(r);
    EXPECT_TRUE(s) << s.error().message();
    return std::move(*s);
  }
  IsolationSpec iso_;
  testing::TempDir work_;
};

TEST_F(SandboxLaunchTest, TheCommandRunsUnderAnInitThatReportsItsExit) {
  Sandbox sandbox = Make();
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c",
            "echo $$; hostname; pwd; cut -d' ' -f1 /proc/1/stat; touch made; kill -TERM $$"};
  r.sandbox = &sandbox;
  Finished f = LaunchAndWait(r);
  EXPECT_FALSE(f.launched.setup_error) << SetupStepName(f.launched.setup_error->step);
  // pid 1 is the init, the command pid 2, in a UTS namespace of its own,
  // in the workspace, which is the test's directory.
  EXPECT_EQ(f.out, "2\ncordon\n/workspace\n1\n") << f.err;
  EXPECT_TRUE(std::filesystem::exists(work_ / "made"));
  // The init exited normally; the command's own end is in its report.
  EXPECT_FALSE(f.exit.signaled);
  ASSERT_TRUE(f.launched.init_report);
  auto command = ReadInitReport(f.launched.init_report.get());
  ASSERT_TRUE(command);
  EXPECT_TRUE(command->signaled);
  EXPECT_EQ(command->status, SIGTERM);
}

TEST_F(SandboxLaunchTest, WithoutACgroupNothingIsBuiltBeforeTheInitIsRecorded) {
  Sandbox sandbox = Make();
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", "touch made"};
  r.sandbox = &sandbox;
  bool ran_while_recording = true;
  r.on_started = [&](const proc::Identity&, pid_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ran_while_recording = std::filesystem::exists(work_ / "made");
    return sys::Result<void>{};
  };
  Finished f = LaunchAndWait(r);
  EXPECT_FALSE(f.launched.setup_error);
  EXPECT_FALSE(ran_while_recording);
  EXPECT_TRUE(std::filesystem::exists(work_ / "made"));
}

TEST_F(SandboxLaunchTest, AFailingMountNamesItsPartAndTheErrno) {
  // Beneath read-only /usr a mount point cannot be made.
  iso_.binds = {{"/etc/hostname", "/usr/cordon-no-such-dir/hostname", false}};
  Sandbox sandbox = Make();
  LaunchRequest r;
  r.argv = {"/bin/true"};
  r.sandbox = &sandbox;
  Finished f = LaunchAndWait(r);
  ASSERT_TRUE(f.launched.setup_error);
  EXPECT_EQ(SetupStepName(f.launched.setup_error->step), "mounts");
  EXPECT_EQ(f.launched.setup_error->err, EROFS);
  EXPECT_EQ(f.launched.setup_error->detail, "mkdir /usr/cordon-no-such-dir");
}

// A parked launch: its init says when it waits, and nothing runs before.
Launched Park(Sandbox& sandbox) {
  LaunchRequest r;
  r.sandbox = &sandbox;
  r.park = true;
  r.wait_for_exec = false;
  auto launched = Launch(r);
  EXPECT_TRUE(launched) << launched.error().message();
  if (!launched) return {};
  char ready = 0;
  EXPECT_EQ(::read(launched->control.get(), &ready, 1), 1);
  EXPECT_EQ(ready, 'r');
  return std::move(*launched);
}

// Collects a launched child's output to EOF and its exit.
Finished Wait(Launched launched) {
  Finished f{std::move(launched), "", "", {}};
  (void)sys::SetNonBlocking(f.launched.stdout_read.get(), false);
  (void)sys::SetNonBlocking(f.launched.stderr_read.get(), false);
  f.out = sys::ReadAll(f.launched.stdout_read.get()).value_or("");
  f.err = sys::ReadAll(f.launched.stderr_read.get()).value_or("");
  f.exit = f.launched.pidfd.Reap().value();
  EXPECT_TRUE(ReadSetupReport(f.launched));
  return f;
}

TEST_F(SandboxLaunchTest, AParkedInitRunsTheCommandItIsSentAndNothingBefore) {
  Sandbox sandbox = Make();
  Launched parked = Park(sandbox);
  ASSERT_TRUE(parked.control);
  // Waiting, it has started nothing: the init is alone in its namespace.
  auto children = sys::ReadFile("/proc/" + std::to_string(parked.identity.pid) + "/task/" +
                                std::to_string(parked.identity.pid) + "/children");
  ASSERT_TRUE(children) << children.error().message();
  EXPECT_EQ(*children, "");
  EXPECT_FALSE(std::filesystem::exists(work_ / "made"));

  LaunchRequest command;
  command.argv = {"/bin/sh", "-c",
                  "echo $$ \"$1\"; env | sort; cat; pwd; ulimit -n; touch made; "
                  "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; exit 7",
                  "sh", "two words"};
  command.env = {"B=2", "A=1"};
  command.stdin_bytes = "from stdin\n";
  command.rlimits = {{RLIMIT_NOFILE, 64, 64}};
  ASSERT_TRUE(SendCommand(parked, command));
  EXPECT_FALSE(parked.control);  // one command per launch
  Finished f = Wait(std::move(parked));
  EXPECT_FALSE(f.launched.setup_error) << SetupStepName(f.launched.setup_error->step);
  // The init's child, with exactly its argv, env, stdin and rlimits, in
  // the workspace, with no privileges and (where the kernel has it) the
  // seccomp filter: the init's own, which it inherited.
  EXPECT_TRUE(f.out.starts_with("2 two words\nA=1\nB=2\n")) << f.out << f.err;
  EXPECT_EQ(f.out.find("HOME="), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("\nfrom stdin\n/workspace\n64\n"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("NoNewPrivs:\t1\n"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("CapEff:\t0000000000000000\n"), std::string::npos) << f.out;
  if (SeccompAvailable()) {
    EXPECT_NE(f.out.find("Seccomp:\t2\n"), std::string::npos) << f.out;
  }
  EXPECT_TRUE(std::filesystem::exists(work_ / "made"));
  ASSERT_TRUE(f.launched.init_report);
  auto exit = ReadInitReport(f.launched.init_report.get());
  ASSERT_TRUE(exit);
  EXPECT_FALSE(exit->signaled);
  EXPECT_EQ(exit->status, 7);
}

TEST_F(SandboxLaunchTest, AParkedCommandThatCannotStartIsASetupError) {
  Sandbox sandbox = Make();
  LaunchRequest command;
  command.argv = {"/nonexistent/program"};
  Finished f = Wait([&] {
    Launched parked = Park(sandbox);
    EXPECT_TRUE(SendCommand(parked, command));
    return parked;
  }());
  ASSERT_TRUE(f.launched.setup_error);
  EXPECT_EQ(SetupStepName(f.launched.setup_error->step), "exec");
  EXPECT_EQ(f.launched.setup_error->err, ENOENT);
}

TEST_F(SandboxLaunchTest, AParkedInitGivenUpEndsWithoutRunningAnything) {
  Sandbox sandbox = Make();
  Launched parked = Park(sandbox);
  parked.control.reset();  // the supervisor gives it up
  Finished f = Wait(std::move(parked));
  ASSERT_TRUE(f.launched.setup_error);
  EXPECT_EQ(SetupStepName(f.launched.setup_error->step), "init");
  EXPECT_EQ(f.launched.setup_error->err, EPIPE);
  EXPECT_EQ(f.out, "");
}

// The init lives as long as its sandbox: were the supervisor's heap in it,
// every page the supervisor wrote would be copied first (forked_memory.h).
// Under AddressSanitizer the heap is forked whole, and is there.
TEST_F(SandboxLaunchTest, AParkedInitHoldsNoneOfTheSupervisorsHeap) {
  std::vector<char> heap(4 << 20, 'x');  // a mapping of the heap's, every page written
  const auto start = reinterpret_cast<uintptr_t>(heap.data());
  Sandbox sandbox = Make();
  Launched parked = Park(sandbox);
  auto maps = sys::ReadFile("/proc/" + std::to_string(parked.identity.pid) + "/maps");
  ASSERT_TRUE(maps) << maps.error().message();
  std::istringstream lines(*maps);
  std::string holding;  // the init's mapping over the heap block, if any
  for (std::string line; std::getline(lines, line);) {
    uintptr_t from = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    uintptr_t to = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    if (from < start + heap.size() && start < to) holding = line;
  }
  EXPECT_EQ(holding.empty(), kHeapLeftOutOfForks) << "the init's mapping: " << holding;
  parked.control.reset();
  (void)Wait(std::move(parked));
}

TEST_F(SandboxLaunchTest, OnlyANamespacedSandboxParksAndOnlyWhatFitsIsSent) {
  LaunchRequest bare;
  bare.park = true;
  auto refused = Launch(bare);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().errno_value(), EINVAL);

  LaunchRequest big;
  big.argv = {"/bin/true", std::string(size_t{2} << 20, 'x')};
  EXPECT_FALSE(FitsParked(big));
  LaunchRequest many;
  many.argv = {"/bin/true"};
  many.env.assign(20000, "A=1");
  EXPECT_FALSE(FitsParked(many));
  EXPECT_FALSE(FitsParked(LaunchRequest{}));
  LaunchRequest small;
  small.argv = {"/bin/true"};
  EXPECT_TRUE(FitsParked(small));

  // Refused before anything is sent: the init still waits for a command.
  Sandbox sandbox = Make();
  Launched parked = Park(sandbox);
  auto sent = SendCommand(parked, big);
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().errno_value(), E2BIG);
  ASSERT_TRUE(parked.control);
  ASSERT_TRUE(SendCommand(parked, small));
  Finished f = Wait(std::move(parked));
  EXPECT_FALSE(f.launched.setup_error);
  auto exit = ReadInitReport(f.launched.init_report.get());
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->status, 0);
}

}  // namespace
}  // namespace cordon::contain
