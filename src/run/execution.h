// One execution under a grant: launch, the I/O pump, the deadline, teardown
// and release. It is a component on a Reactor: the CLI runs it on its own
// epoll loop, the daemon on its Asio loop; there is one pump, not two.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "contain/grant.h"
#include "contain/launch.h"
#include "contain/sandbox.h"
#include "contain/signaller.h"
#include "contain/spec.h"
#include "contain/teardown.h"
#include "run/capture.h"
#include "run/result.h"
#include "store/store.h"
#include "sys/reactor.h"
#include "sys/timerfd.h"
#include "sys/workers.h"

namespace cordon::run {

enum class StreamId { kStdout, kStderr };

struct ExecutionOptions {
  // Receives output as it is captured (kept bytes only), for pass-through
  // and streaming. Optional.
  std::function<void(StreamId, std::string_view)> on_output;
  // How long after SIGKILL death must be observed before survivors are named.
  std::chrono::milliseconds verify_timeout{5000};
  // Run this already-open, verified file instead of looking argv[0] up
  // (contain::LaunchRequest::exec_fd); the caller keeps it open until Start
  // returns.
  int exec_fd = -1;
  bool exec_fd_is_script = false;
  // When >= 0, the main process's stdin is this descriptor (see
  // contain::LaunchRequest::stdin_fd) instead of the spec's stdin bytes.
  int stdin_fd = -1;
  // false: output is only streamed to `on_output` (every byte, raw), not
  // captured, so a long-lived process (a session's shell) is never cut off
  // at the cap; its consumer frames and caps it. The result's streams stay
  // empty.
  bool keep_output = true;
  // Where the end of a run that blocks runs: reading its cgroups'
  // accounting, removing them (an rmdir may wait for the kernel's cgroup
  // lock) and recording the release in the store. When set, it is given
  // that work (`release`), to run on another thread, and `then`, to run on
  // the reactor's thread once `release` has: `then` calls `done`. In
  // between the Execution must not be destroyed; it has finished (a Cancel
  // does nothing). Null: both at once, on the reactor's thread.
  std::function<void(std::move_only_function<void()> release, std::move_only_function<void()> then)>
      release_elsewhere;
};

// A release_elsewhere that gives the release to `offload`'s workers (which
// must outlive every Execution given it).
decltype(ExecutionOptions::release_elsewhere) ReleaseOn(sys::Offload& offload);

class Execution final {
 public:
  using Done = std::function<void(RunResult)>;

  // Launches the grant's main process and supervises it on `reactor`.
  // `store`, `signaller` and `reactor` must outlive the Execution. `done`
  // runs once; it must not destroy the Execution (destroy it afterwards).
  // On error nothing is left running: the grant is released and its
  // cgroups removed.
  static sys::Result<std::unique_ptr<Execution>> Start(sys::Reactor& reactor, store::Store& store,
                                                       contain::Signaller& signaller,
                                                       contain::Grant grant,
                                                       const contain::Spec& spec,
                                                       ExecutionOptions options, Done done);
  // A warm execution: the grant's sandbox is made and its init waits,
  // parked, for a command (contain::LaunchRequest::park). `spec` is the
  // one the grant was admitted for (its isolation and workspace); its argv
  // is not run. `ready` runs once the init waits; `done` runs if the init
  // ends while parked, or once a Cancel has torn it down. Unpark gives it
  // its command. Needs a namespaced grant.
  static sys::Result<std::unique_ptr<Execution>> Park(sys::Reactor& reactor, store::Store& store,
                                                      contain::Signaller& signaller,
                                                      contain::Grant grant,
                                                      const contain::Spec& spec,
                                                      std::function<void()> ready, Done done);
  // Start and Park in two halves, for a supervisor that launches off its
  // loop. Spawn and SpawnParked make the sandbox and its process (the
  // grant's start recorded) without touching `reactor`: they may run on
  // any thread. Attach, on the reactor's thread, then supervises it (its
  // output, exit and deadline). An Execution that spawned and is destroyed
  // unattached (its Attach failed, or its owner's before it) kills its
  // tree then, and waits for verified death (blocking, up to the verify
  // timeout): nothing it launched runs on unsupervised.
  static sys::Result<std::unique_ptr<Execution>> Spawn(sys::Reactor& reactor, store::Store& store,
                                                       contain::Signaller& signaller,
                                                       contain::Grant grant,
                                                       const contain::Spec& spec,
                                                       ExecutionOptions options, Done done);
  static sys::Result<std::unique_ptr<Execution>> SpawnParked(
      sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
      contain::Grant grant, const contain::Spec& spec, std::function<void()> ready, Done done);
  sys::Result<void> Attach();

  // Whether `spec`'s command fits the message a parked init takes
  // (contain::FitsParked); one that does not is launched cold.
  static bool FitsParked(const contain::Spec& spec);
  // Whether a parked execution's init is waiting for its command.
  bool parked_ready() const { return parked_ && parked_ready_; }

  // Runs `spec`'s command (argv, env, stdin, rlimits, timeout and output
  // cap; the grant's owner becomes its owner) in a ready parked execution,
  // as Start would have, with `options` and `done` replacing the parked
  // ones. `options.exec_fd` and `stdin_fd` are not taken. When the command
  // cannot be sent (the init is gone) the execution stays parked and
  // records a setup failure at `init`: Cancel it, and `done` reports that.
  sys::Result<void> Unpark(const contain::Spec& spec, ExecutionOptions options, Done done);

  ~Execution();
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  // Stops the run: SIGTERM, grace, SIGKILL; the outcome is `cancelled`
  // unless the run had already ended or timed out.
  void Cancel();

  // Stops reading the command's `id` stream and closes its end: whoever
  // read it went away, so the command's next write there fails (SIGPIPE,
  // EPIPE) as it would with nothing between them. What was read stays
  // captured.
  void CloseOutput(StreamId id);

  // Sends `sig` to the main process's process group while the main process
  // runs (a session's interrupt: SIGINT to the command and its shell).
  sys::Result<void> Interrupt(int sig);
  // Sends `sig`, by identity (proc::SignalIdentity), to each live process
  // of that group that started at or after `since_ticks`
  // (proc::TicksSinceBoot), but the main process (and the command, where
  // the main process is a pid namespace's init): what a shell's command
  // started and left behind. Returns how many got it.
  sys::Result<int> SignalGroupStartedSince(int sig, uint64_t since_ticks);

  // After `done` reported a release that was not verified (the grant stays
  // active, naming survivors): tears the tree down again, at once. On
  // verified death the cgroups go and the grant is recorded `released`.
  // `retried` gets the new release; it may run before this returns. For the
  // daemon's retries of a quarantined session.
  void RetryRelease(std::function<void(const contain::Release&)> retried);

  const std::string& grant_id() const { return grant_.id; }
  const contain::Grant& grant() const { return grant_; }

 private:
  struct Pipe {
    sys::UniqueFd fd;
    Capture capture;
    StreamId id;
  };
  // kDiscarded: a parked execution cancelled, or one whose command could
  // not be sent (torn down at once: nothing of a caller's runs there).
  enum class Stop { kNone, kMainExited, kTimedOut, kCancelled, kDiscarded };

  Execution(sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
            contain::Grant grant, const contain::Spec& spec, ExecutionOptions options, Done done);
  sys::Result<void> Begin(const contain::Spec& spec);  // Spawn's launch
  void OnParkedReadable();
  void OnReadable(Pipe& pipe);
  bool ReadSome(Pipe& pipe, int max_reads);  // false at EOF or error
  void OnMainExit();
  // The main process was reaped: with a pid namespace it is the init, and
  // the command's own exit is what the init reported.
  void TakeExit(sys::ChildExit exit);
  void OnDeadline();
  sys::Result<void> ArmDeadline();
  void StartTeardown(Stop reason);
  void OnReleased(const contain::Release& release);
  void Finish();
  // Destroyed unattached: KillNow, then released as a cancelled run (a
  // death not verified leaves the grant active, naming survivors, for reap).
  void KillUnattached();
  void Conclude();  // the result from the accounting, the cgroups removed, the release recorded

  sys::Reactor& reactor_;
  store::Store& store_;
  contain::Signaller& signaller_;
  contain::Grant grant_;
  std::chrono::milliseconds grace_;
  std::optional<std::chrono::milliseconds> timeout_;
  ExecutionOptions options_;
  Done done_;

  // Names a failed mount step in the child's setup report (child_.sandbox).
  std::optional<contain::Sandbox> sandbox_;
  contain::Launched child_;
  Pipe out_;
  Pipe err_;
  std::optional<sys::TimerFd> deadline_;
  std::unique_ptr<contain::Tree> tree_;
  std::unique_ptr<contain::Teardown> teardown_;
  std::optional<sys::ChildExit> exit_;
  std::chrono::steady_clock::time_point exited_at_;
  Stop stop_ = Stop::kNone;
  bool attached_ = false;  // Attach succeeded
  bool watching_child_ = false;
  bool watching_control_ = false;
  bool finished_ = false;
  bool parked_ = false;        // waiting for its command (Park, until Unpark)
  bool parked_ready_ = false;  // the parked init said it waits
  std::function<void()> on_parked_ready_;
  RunResult result_;
};

}  // namespace cordon::run
