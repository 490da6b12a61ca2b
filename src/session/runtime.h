// What a session runs: a Runtime inside the containment boundary, one per
// generation (or restart) of a session. Two kinds exist: a persistent shell
// (shell.h) and a Jupyter kernel (kernel.h, built only into the dynamically
// linked daemon, since it needs libzmq). Sessions (sessions.h) drives either
// through this interface; the state machine does not know which it has.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "contain/grant.h"
#include "contain/spec.h"
#include "jupyter/execute.h"
#include "run/execution.h"
#include "run/result.h"

namespace cordon::session {

struct ExecRequest {
  std::string command;  // a shell command line, or a kernel's code
  std::chrono::milliseconds timeout{600000};
  std::optional<std::string> stdin_bytes;  // none: the command reads EOF (shells only)
  size_t output_limit = 10 << 20;          // per stream (a kernel: one budget for all output)
  std::chrono::milliseconds grace{2000};   // after SIGINT at the deadline
  // The command's output as it arrives, before any cap (a shell's stdout
  // and stderr, a kernel's `stream` text), for a caller that shows progress
  // (the MCP tools). Called on the loop while the execution runs, never
  // after `done`; it must not call into the runtime. Null: not asked.
  std::function<void(std::string_view)> on_output;
};

struct ExecResult {
  // A shell's outcome.
  std::optional<int> exit_code;  // 128+N when the shell was killed by signal N
  run::StreamResult out;
  run::StreamResult err;
  bool shell_restarted = false;  // the command ended the shell; a fresh one started
  // A kernel's outcome (none for a shell).
  std::optional<jupyter::ExecuteOutput> kernel;
  // Both.
  bool timed_out = false;
  bool invalidated = false;  // the session was torn down (timeout ladder, death)
  // The memory controller killed something of the session while it ran
  // (the command, or the runtime itself: then `invalidated` or
  // `shell_restarted` says what became of the session).
  bool oom_killed = false;
  int64_t duration_ms = 0;
};

// A shell: {"exit_code", "stdout", "stderr", "stdout_truncated",
//  "stderr_truncated", "stdout_bytes", "stderr_bytes", "timed_out",
//  "invalidated", "shell_restarted", "duration_ms"}.
// A kernel: {"status", "stdout", "stderr", "results", "error",
//  "execution_count", "truncated", "timed_out", "invalidated", "duration_ms"}.
// The output is moved into it, not copied.
nlohmann::json ToJson(ExecResult&& result);

class Runtime {
 public:
  enum class End {
    kExited,       // it exited on its own (a command ran `exit`, or it died)
    kInvalidated,  // the timeout ladder tore it down: SIGINT did not bring it back
    kKilled,       // Kill() was called
  };
  struct Ended {
    End end;
    run::RunResult run;  // its release says whether death was verified
    // The execution that was running, if any, with what it had produced.
    std::optional<ExecResult> exec;
    std::function<void(ExecResult)> exec_done;
    std::string why;  // what the runtime knows about its end ("" if nothing)
  };
  struct Events {
    std::function<void()> ready;
    // Runs once; must not destroy the Runtime.
    std::function<void(Ended)> ended;
  };

  virtual ~Runtime() = default;

  // On the loop, once, after the factory made it (which may have been on
  // another thread): supervises it. Its events come only after this.
  virtual sys::Result<void> Attach() = 0;

  // Runs one execution; the runtime must be ready and idle. `done` runs
  // once; if the runtime ends first, Ended carries it.
  virtual void Exec(ExecRequest request, std::function<void(ExecResult)> done) = 0;
  // SIGINT to what runs. False when nothing was signalled.
  virtual bool Interrupt() = 0;
  // Tears the whole tree down now; `ended` follows with kKilled.
  virtual void Kill() = 0;
  // See run::Execution::RetryRelease.
  virtual void RetryRelease(std::function<void(const contain::Release&)> retried) = 0;

  virtual bool ready() const = 0;    // started and idle
  virtual bool running() const = 0;  // an Exec is in progress
  // Working, whoever asked: an Exec, or (a kernel) a request of a
  // websocket client's. A busy session is not idle.
  virtual bool busy() const { return running(); }
  virtual const std::string& grant_id() const = 0;
  virtual const contain::Grant& grant() const = 0;
  // When the runtime exits on its own after a command, a fresh one starts
  // in its place (a shell's `exit`); otherwise the session is invalidated.
  virtual bool restarts_on_exit() const = 0;
  // Adds what this kind shows in a session's view (a kernel's
  // "execution_state").
  virtual void Describe(nlohmann::json& view) const { (void)view; }
  // A pooled runtime was handed to session `session_id`.
  virtual void Rebind(const std::string& session_id) { (void)session_id; }
};

// Where the end of a runtime's teardown runs (run::ExecutionOptions).
using ReleaseElsewhere = decltype(run::ExecutionOptions::release_elsewhere);

// Makes a runtime of one kind for a session: admits `spec` (its command is
// the runtime's own) and launches it. It touches no reactor, so it may run
// on a worker thread; Runtime::Attach follows on the loop, then
// `events.ready`.
using RuntimeFactory = std::function<std::expected<std::unique_ptr<Runtime>, contain::AdmitError>(
    const std::string& session_id, contain::Spec spec, Runtime::Events events,
    ReleaseElsewhere release_elsewhere)>;

}  // namespace cordon::session
