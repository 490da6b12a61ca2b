// One runtime of a shell session: a persistent, interactive bash inside the
// containment boundary (its own grant and cgroup, admitted by
// contain::Acquire and supervised by run::Execution, the same pump as a
// one-shot run), fed commands on a pipe and framed per execution (see
// framing.h).
//
// Why interactive bash (`-i`, without line editing, prompts emptied): only an
// interactive shell treats SIGINT the way a person at a terminal expects:
// the running command (even a loop of builtins) is abandoned and the shell
// reads its next line, which is the end marker. A non-interactive shell
// would exit, or finish the rest of the command list.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "contain/grant.h"
#include "contain/probe.h"
#include "contain/signaller.h"
#include "contain/spec.h"
#include "run/capture.h"
#include "run/execution.h"
#include "session/alarm.h"
#include "session/framing.h"
#include "session/runtime.h"
#include "store/store.h"

namespace cordon::session {

class Shell final : public Runtime {
 public:
  // Spawn, then Attach.
  static std::expected<std::unique_ptr<Shell>, contain::AdmitError> Start(
      sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
      const contain::Probe& probe, contain::Spec spec, std::chrono::milliseconds verify_timeout,
      Events events, ReleaseElsewhere release_elsewhere = nullptr);
  // Admits `spec` (its command is replaced by the shell) and launches it;
  // touches no reactor, so it may run on any thread. Nothing is supervised
  // and no event comes until Attach. `release_elsewhere`: where the end of
  // its teardown runs (run::ExecutionOptions).
  static std::expected<std::unique_ptr<Shell>, contain::AdmitError> Spawn(
      sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
      const contain::Probe& probe, contain::Spec spec, std::chrono::milliseconds verify_timeout,
      Events events, ReleaseElsewhere release_elsewhere = nullptr);
  // Supervises the shell and sends the bootstrap; `ready` follows once the
  // shell has answered.
  sys::Result<void> Attach() override;
  ~Shell() override;
  Shell(const Shell&) = delete;
  Shell& operator=(const Shell&) = delete;

  // Runs one command; the shell must be ready and idle. `done` runs once,
  // when the end markers arrive; if the shell ends first, Ended carries it.
  void Exec(ExecRequest request, std::function<void(ExecResult)> done) override;
  // SIGINT to the running command (and the shell, which survives it),
  // repeated every kInterruptRepeat while that command runs, for up to a
  // second: a SIGINT that lands while the shell forks the command is lost
  // (the child does not exist yet, and the shell then waits for it). Once
  // an interrupted command's end markers are in, every process it started
  // that is still in the shell's group gets one more: bash holds SIGINT
  // blocked across fork, so a child forked as the SIGINT lands never gets
  // it, and the shell, which did, abandons the command without waiting for
  // that child. What the command put in the background ignores SIGINT
  // (bash starts it so, without job control) and stays.
  // False when no command runs.
  bool Interrupt() override;
  // Tears the whole tree down now; `ended` follows with kKilled.
  void Kill() override;
  // See run::Execution::RetryRelease.
  void RetryRelease(std::function<void(const contain::Release&)> retried) override;

  bool ready() const override { return phase_ == Phase::kIdle; }
  bool running() const override {
    return phase_ == Phase::kRunning || phase_ == Phase::kInterrupting;
  }
  const std::string& grant_id() const override { return execution_->grant_id(); }
  const contain::Grant& grant() const override { return execution_->grant(); }
  bool restarts_on_exit() const override { return true; }

 private:
  enum class Phase { kStarting, kIdle, kRunning, kInterrupting, kEnding, kEnded };
  static constexpr std::chrono::milliseconds kInterruptRepeat{100};

  Shell(sys::Reactor& reactor, Events events) : reactor_(reactor), events_(std::move(events)) {}
  void OnOutput(run::StreamId id, std::string_view bytes);
  void OnFramed();
  void OnDeadline();
  // Sends SIGINT now and `repeats` more times while execution `serial` runs.
  bool SendInterrupt(uint64_t serial, int repeats);
  void OnShellDone(run::RunResult result);
  void Send(const std::string& text);
  ExecResult TakeResult();

  sys::Reactor& reactor_;
  Events events_;
  sys::UniqueFd control_;  // the shell's stdin: commands go in here
  std::unique_ptr<run::Execution> execution_;
  std::unique_ptr<Alarm> alarm_;            // the deadline, then the grace
  std::unique_ptr<Alarm> interrupt_alarm_;  // repeated SIGINTs
  uint64_t serial_ = 0;                     // of the current execution
  Phase phase_ = Phase::kStarting;
  End ending_ = End::kExited;

  FrameReader out_frame_;
  FrameReader err_frame_;
  std::optional<run::Capture> out_;
  std::optional<run::Capture> err_;
  ExecRequest request_;
  std::function<void(ExecResult)> exec_done_;
  bool timed_out_ = false;
  bool interrupted_ = false;  // the current execution got a SIGINT
  std::chrono::steady_clock::time_point exec_started_;
  uint64_t exec_started_ticks_ = 0;  // proc::TicksSinceBoot
};

}  // namespace cordon::session
