// The Shell on the CLI's kind of loop (EpollReactor): the runtime itself,
// without HTTP.
#include "session/shell.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "support.h"
#include "sys/epoll_reactor.h"

namespace cordon::session {
namespace {

class InertSignaller final : public contain::Signaller {
 public:
  bool broken = true;
  sys::Result<void> Signal(const sys::PidFd& p, int sig) override {
    return broken ? sys::Result<void>{} : kernel.Signal(p, sig);
  }
  sys::Result<void> KillCgroup(const contain::CgroupDir& g) override {
    return broken ? sys::Result<void>{} : kernel.KillCgroup(g);
  }
  contain::KernelSignaller kernel;
};

class ShellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.emplace(std::move(*store::Store::Open(state_.path())));
    reactor_.emplace(std::move(*sys::EpollReactor::Create()));
  }
  std::unique_ptr<Shell> Start(contain::Signaller& signaller) {
    contain::Spec spec;
    spec.workspace = work_.path();
    spec.env = {{"PATH", "/usr/bin:/bin"}};
    Shell::Events events;
    events.ready = [this] { ready_ = true; };
    events.ended = [this](Shell::Ended e) { ended_ = std::move(e); };
    auto shell = Shell::Start(*reactor_, *store_, signaller, testing::TestProbe(), spec,
                              std::chrono::milliseconds(300), std::move(events));
    EXPECT_TRUE(shell) << shell.error().message;
    EXPECT_TRUE(reactor_->RunUntil([&] { return ready_ || ended_.has_value(); }));
    return shell ? std::move(*shell) : nullptr;
  }
  static ExecRequest Request(const std::string& command, int64_t timeout_ms = 20000) {
    ExecRequest r;
    r.command = command;
    r.timeout = std::chrono::milliseconds(timeout_ms);
    r.grace = std::chrono::milliseconds(300);
    return r;
  }
  ExecResult Exec(Shell& shell, const std::string& command, int64_t timeout_ms = 20000) {
    std::optional<ExecResult> result;
    shell.Exec(Request(command, timeout_ms), [&](ExecResult e) { result = std::move(e); });
    EXPECT_TRUE(reactor_->RunUntil([&] { return result.has_value() || ended_.has_value(); }));
    if (!result && ended_ && ended_->exec) return *ended_->exec;
    return result.value_or(ExecResult{});
  }

  testing::TempDir state_;
  testing::TempDir work_;
  std::optional<store::Store> store_;
  std::optional<sys::EpollReactor> reactor_;
  bool ready_ = false;
  std::optional<Shell::Ended> ended_;
};

TEST_F(ShellTest, RunsCommandsInOnePersistentShell) {
  contain::KernelSignaller kernel;
  auto shell = Start(kernel);
  ASSERT_TRUE(shell && ready_);
  EXPECT_EQ(Exec(*shell, "A=1; cd /").exit_code, 0);
  ExecResult r = Exec(*shell, "echo $A $PWD; echo e >&2; false");
  EXPECT_EQ(r.out.data, "1 /\n");
  EXPECT_EQ(r.err.data, "e\n");
  EXPECT_EQ(r.exit_code, 1);
  ExecResult timed = Exec(*shell, "sleep 30", 100);
  EXPECT_TRUE(timed.timed_out);
  EXPECT_EQ(timed.exit_code, 130);
  shell->Kill();
  ASSERT_TRUE(reactor_->RunUntil([&] { return ended_.has_value(); }));
  EXPECT_EQ(ended_->end, Shell::End::kKilled);
  EXPECT_TRUE(ended_->run.release.dead);
}

TEST_F(ShellTest, StreamsOutputToOnOutputWhileTheCommandRuns) {
  contain::KernelSignaller kernel;
  auto shell = Start(kernel);
  ASSERT_TRUE(shell && ready_);
  std::string seen;
  std::optional<ExecResult> result;
  bool after_done = false;
  auto held = std::make_shared<int>(0);  // what the callback holds: released at the end
  // It ends once the test has seen its output and creates `go`.
  ExecRequest r = Request("echo first; echo err >&2; until [ -e go ]; do sleep 0.05; done");
  r.on_output = [&seen, &result, &after_done, held](std::string_view b) {
    if (result) after_done = true;
    seen.append(b);
  };
  shell->Exec(std::move(r), [&](ExecResult e) { result = std::move(e); });
  // Seen while the command still sleeps: streamed, not given at the end.
  ASSERT_TRUE(reactor_->RunUntil([&] {
    return (seen.find("first\n") != std::string::npos && seen.find("err\n") != std::string::npos) ||
           result.has_value() || ended_.has_value();
  }));
  EXPECT_FALSE(result.has_value());
  std::ofstream(work_.path() + "/go").put('\n');
  ASSERT_TRUE(reactor_->RunUntil([&] { return result.has_value() || ended_.has_value(); }));
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->out.data, "first\n");
  EXPECT_EQ(result->err.data, "err\n");
  EXPECT_EQ(result->exit_code, 0);
  // Only the command's bytes (no framing), and nothing after done.
  const size_t total = std::string("first\nerr\n").size();
  EXPECT_EQ(seen.size(), total) << seen;
  EXPECT_FALSE(after_done);
  EXPECT_EQ(held.use_count(), 1);
  // An exec without it runs as before.
  EXPECT_EQ(Exec(*shell, "echo again").out.data, "again\n");
  EXPECT_EQ(seen.size(), total);
  shell->Kill();
  ASSERT_TRUE(reactor_->RunUntil([&] { return ended_.has_value(); }));
}

// bash holds SIGINT blocked while it forks, so a child forked as an
// interrupt lands never gets it, and the shell, which did, abandons the
// command without waiting for that child: the execution ended "interrupted"
// while a command of it ran on (bench/interrupt_stress.py counts these). A
// trap stands in for that race here: it starts a process after the SIGINT,
// in the shell's group, that does not ignore SIGINT, and a command in the
// background (`cmd &`), which does.
TEST_F(ShellTest, AnInterruptedCommandLeavesNothingThatTakesSigint) {
  contain::KernelSignaller kernel;
  auto shell = Start(kernel);
  ASSERT_TRUE(shell && ready_);
  // The trap returns once both are `sleep` (exec'd): before that, the first
  // still ignored SIGINT as a background child does, and a SIGINT could
  // have been lost on it.
  ExecRequest r = Request(
      "trap '(trap - INT; exec sleep 300) & echo $! > late; sleep 300 & echo $! > background; "
      "for p in $(cat late) $(cat background); do "
      "until read -r c < /proc/$p/comm && [ \"$c\" = sleep ]; do :; done; done' "
      "INT; echo started; sleep 300");
  std::string seen;
  r.on_output = [&seen](std::string_view b) { seen.append(b); };
  std::optional<ExecResult> result;
  shell->Exec(std::move(r), [&](ExecResult e) { result = std::move(e); });
  ASSERT_TRUE(reactor_->RunUntil(
      [&] { return seen.find("started\n") != std::string::npos || result || ended_; }));
  ASSERT_TRUE(shell->Interrupt());
  ASSERT_TRUE(reactor_->RunUntil([&] { return result.has_value() || ended_.has_value(); }));
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->exit_code, 130);
  // The first ends (a zombie has), looked at from the shell for up to 5 s.
  EXPECT_EQ(Exec(*shell,
                 "p=$(cat late); for i in $(seq 100); do s=$(cut -d' ' -f3 /proc/$p/stat "
                 "2>/dev/null); case $s in ''|Z) echo ended; break;; esac; sleep 0.05; done")
                .out.data,
            "ended\n");
  // What the command put in the background ignores SIGINT, and stays.
  std::string background =
      Exec(*shell, "cut -d' ' -f3 /proc/$(cat background)/stat 2>/dev/null || echo dead").out.data;
  EXPECT_NE(background, "dead\n");
  EXPECT_NE(background, "Z\n");
  shell->Kill();
  ASSERT_TRUE(reactor_->RunUntil([&] { return ended_.has_value(); }));
  EXPECT_TRUE(ended_->run.release.dead);
}

TEST_F(ShellTest, ATeardownThatFailsCanBeRetried) {
  InertSignaller signaller;
  auto shell = Start(signaller);
  ASSERT_TRUE(shell && ready_);
  shell->Kill();
  ASSERT_TRUE(reactor_->RunUntil([&] { return ended_.has_value(); }));
  EXPECT_FALSE(ended_->run.release.dead);
  EXPECT_FALSE(ended_->run.release.survivors.empty());
  auto grant = store_->GetGrant(shell->grant_id());
  ASSERT_TRUE(grant && *grant);
  EXPECT_EQ((*grant)->state, "active");

  signaller.broken = false;
  std::optional<contain::Release> retried;
  shell->RetryRelease([&](const contain::Release& r) { retried = r; });
  ASSERT_TRUE(reactor_->RunUntil([&] { return retried.has_value(); }));
  EXPECT_TRUE(retried->dead);
  grant = store_->GetGrant(shell->grant_id());
  EXPECT_EQ((*grant)->state, "released");
}

}  // namespace
}  // namespace cordon::session
