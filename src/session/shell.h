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
#include "store/store.h"

namespace cordon::session {

struct ExecRequest {
  std::string command;
  std::chrono::milliseconds timeout{600000};
  std::optional<std::string> stdin_bytes;  // none: the command reads EOF
  size_t output_limit = 10 << 20;          // per stream
  std::chrono::milliseconds grace{2000};   // after SIGINT at the deadline
};

struct ExecResult {
  std::optional<int> exit_code;  // 128+N when the shell was killed by signal N
  run::StreamResult out;
  run::StreamResult err;
  bool timed_out = false;
  bool invalidated = false;      // the session was torn down (timeout ladder)
  bool shell_restarted = false;  // the command ended the shell; a fresh one started
  int64_t duration_ms = 0;
};

// {"exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
//  "stdout_bytes", "stderr_bytes", "timed_out", "invalidated",
//  "shell_restarted", "duration_ms"}
nlohmann::json ToJson(const ExecResult& result);

class Shell final {
 public:
  enum class End {
    kExited,       // the shell exited on its own (a command ran `exit`, or it died)
    kInvalidated,  // the timeout ladder tore it down: SIGINT did not bring it back
    kKilled,       // Kill() was called
  };
  struct Ended {
    End end;
    run::RunResult run;  // its release says whether death was verified
    // The execution that was running, if any, with what it had produced.
    std::optional<ExecResult> exec;
    std::function<void(ExecResult)> exec_done;
  };
  struct Events {
    std::function<void()> ready;
    // Runs once; must not destroy the Shell.
    std::function<void(Ended)> ended;
  };

  // Admits `spec` (its command is replaced by the shell), launches it and
  // sends the bootstrap; `ready` follows once the shell has answered.
  static std::expected<std::unique_ptr<Shell>, contain::AdmitError> Start(
      sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
      const contain::Probe& probe, contain::Spec spec, std::chrono::milliseconds verify_timeout,
      Events events);
  ~Shell();
  Shell(const Shell&) = delete;
  Shell& operator=(const Shell&) = delete;

  // Runs one command; the shell must be ready and idle. `done` runs once,
  // when the end markers arrive; if the shell ends first, Ended carries it.
  void Exec(ExecRequest request, std::function<void(ExecResult)> done);
  // SIGINT to the running command (and the shell, which survives it),
  // repeated every kInterruptRepeat while that command runs, for up to a
  // second: a SIGINT that lands while the shell forks the command is lost
  // (the child does not exist yet, and the shell then waits for it).
  // False when no command runs.
  bool Interrupt();
  // Tears the whole tree down now; `ended` follows with kKilled.
  void Kill();
  // See run::Execution::RetryRelease.
  void RetryRelease(std::function<void(const contain::Release&)> retried);

  bool ready() const { return phase_ == Phase::kIdle; }
  bool running() const { return phase_ == Phase::kRunning || phase_ == Phase::kInterrupting; }
  const std::string& grant_id() const { return execution_->grant_id(); }

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
  std::chrono::steady_clock::time_point exec_started_;
};

}  // namespace cordon::session
