// One runtime of a `python` session: Debian's ipykernel inside the
// containment boundary (its own grant, cgroup and, when isolated,
// namespaces, seccomp and Landlock, like a shell), driven over ZeroMQ `ipc`
// sockets in a private runtime directory (0700, bound into the sandbox at
// kKernelDir) with a fresh key per kernel. The key stays in the daemon and
// in the kernel's own connection file (0600): API clients never see it.
//
// Readiness: kernel_info_request, repeated, until one is answered and its
// `status: idle` has arrived on iopub (a SUB socket misses what is
// published before it joined), within KernelContext::ready_timeout. The heartbeat is pinged
// while the kernel lives; a kernel that stops answering it for
// heartbeat_timeout, or whose process exits, is dead.
//
// Output floods: the kernel is started with its stdout/stderr streams
// publishing at most kStreamChunk characters per message (ipykernel would
// otherwise send whatever was written in 0.2 s as one message, hundreds of
// megabytes in a print loop), and the daemon holds a few messages of it at
// a time (jupyter::ClientOptions). A message over max_message_bytes ends
// its connection instead: the execution's output is then cut there,
// `truncated`, with a note saying so, and the kernel is interrupted as at
// the budget; a kernel_info_request, answered on shell after the
// execution, tells when it is over if its idle status was among the lost.
//
// Built into cordon_jupyter (libzmq), not into the static `cordon`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "contain/probe.h"
#include "contain/signaller.h"
#include "jupyter/execute.h"
#include "jupyter/kernel_client.h"
#include "run/execution.h"
#include "session/alarm.h"
#include "session/runtime.h"
#include "store/store.h"

namespace cordon::session {

// Where an isolated kernel sees its runtime directory.
inline constexpr const char* kKernelDir = "/run/cordon-kernel";

// What every kernel's messages are also shown to (the Kernel Gateway
// relay), by session id. Runs on the reactor.
class KernelListener {
 public:
  virtual ~KernelListener() = default;
  virtual void OnKernelMessage(const std::string& session_id, jupyter::Channel channel,
                               const jupyter::Message& message) = 0;
  // The kernel answered: it is ready for messages.
  virtual void OnKernelReady(const std::string& session_id) = 0;
  // The kernel's process is gone (died, torn down, killed).
  virtual void OnKernelEnded(const std::string& session_id) = 0;
  // A message from the kernel failed verification and was dropped.
  virtual void OnKernelDropped(const std::string& session_id, jupyter::Channel channel,
                               const std::string& why) = 0;
  // A connection to the kernel was reset: messages on it were lost.
  virtual void OnKernelReset(const std::string& session_id, jupyter::Channel channel,
                             const std::string& why) = 0;
};

// The most characters ipykernel's stdout/stderr put in one stream message
// (the kernel flushes when its buffer reaches it).
inline constexpr size_t kStreamChunk = 256 << 10;

// The least KernelContext::max_message_bytes is: rich outputs (an image, a
// table) are larger than any stream message.
inline constexpr int64_t kMinKernelMessageBytes = int64_t{64} << 20;

struct KernelContext {
  sys::Reactor* reactor = nullptr;
  store::Store* store = nullptr;
  contain::Signaller* signaller = nullptr;
  const contain::Probe* probe = nullptr;
  jupyter::ZmqContext* zmq = nullptr;
  // Runtime directories are made beneath it (short: unix socket paths are
  // at most 107 bytes).
  std::string runtime_root;
  std::chrono::milliseconds verify_timeout{5000};
  std::chrono::milliseconds ready_timeout{60000};
  std::chrono::milliseconds heartbeat_interval{2000};
  std::chrono::milliseconds heartbeat_timeout{30000};
  // After an interrupt that is not an execution's deadline (the gateway's
  // POST .../interrupt): how long the kernel has to come back to idle
  // before it is torn down.
  std::chrono::milliseconds interrupt_grace{10000};
  std::string python = "/usr/bin/python3";
  // A larger message from the kernel ends its connection: the larger of
  // --max-message-size and kMinKernelMessageBytes (the relay refuses, whole,
  // what is over the former; this bounds what the daemon takes in at all).
  int64_t max_message_bytes = kMinKernelMessageBytes;
  KernelListener* listener = nullptr;  // optional
};

// The factory Sessions uses for kind `python` (SessionOptions::python).
// Removes what earlier daemons left beneath `context.runtime_root`.
RuntimeFactory MakeKernelFactory(KernelContext context);

class Kernel final : public Runtime {
 public:
  // Admits `spec` (its command is replaced by the kernel's launcher), writes
  // its connection file and launches it; touches no reactor, so it may run
  // on any thread. Nothing is supervised until Attach.
  static std::expected<std::unique_ptr<Kernel>, contain::AdmitError> Spawn(
      const KernelContext& context, const std::string& session_id, contain::Spec spec,
      Events events, ReleaseElsewhere release_elsewhere = nullptr);
  // Connects the daemon's client and supervises the process; `ready`
  // follows once the kernel has answered on every channel.
  sys::Result<void> Attach() override;
  ~Kernel() override;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Runs `request.command` as code; one output budget (output_limit). Past
  // the budget the kernel is interrupted and drained; at the deadline it is
  // interrupted, and torn down if it is not idle again within the grace.
  void Exec(ExecRequest request, std::function<void(ExecResult)> done) override;
  // SIGINT to the kernel's process group inside its boundary (delivered
  // once: the sandbox's init does not forward SIGINT). If it was busy and
  // is not idle again within interrupt_grace, it is torn down.
  bool Interrupt() override;
  void Kill() override;
  void RetryRelease(std::function<void(const contain::Release&)> retried) override;

  bool ready() const override { return phase_ == Phase::kIdle; }
  bool running() const override { return phase_ == Phase::kRunning || phase_ == Phase::kDraining; }
  bool busy() const override { return running() || busy_hint_ || execution_state_ == "busy"; }
  const std::string& grant_id() const override { return execution_->grant_id(); }
  const contain::Grant& grant() const override { return execution_->grant(); }
  bool restarts_on_exit() const override { return false; }
  void Describe(nlohmann::json& view) const override;
  void Rebind(const std::string& session_id) override { session_id_ = session_id; }

  // The relay: a client's message, signed with this kernel's key and sent
  // on `channel` (shell, control or stdin).
  sys::Result<void> Forward(jupyter::Channel channel, jupyter::Message message);
  // "starting", "idle" or "busy", from the kernel's iopub status.
  const std::string& execution_state() const { return execution_state_; }

 private:
  enum class Phase { kStarting, kIdle, kRunning, kDraining, kEnding, kEnded };

  Kernel(const KernelContext& context, std::string session_id, Events events)
      : context_(context), session_id_(std::move(session_id)), events_(std::move(events)) {}
  void OnMessage(jupyter::Channel channel, const jupyter::Message& message);
  void AskInfo();
  // Ready once kernel_info_request was answered, its idle seen on iopub,
  // and the client connected on every request channel.
  void MaybeReady();
  void OnReady();
  void Heartbeat();
  void Finish();  // the running execution is complete
  void Drain(std::chrono::milliseconds grace, const std::string& why);
  void OnDeadline();
  void Escalate(const std::string& why);
  void OnDone(run::RunResult result);
  void OnReset(jupyter::Channel channel);
  void Probe();
  // A message of the probe arrived; true when it ended the execution.
  bool OnProbe(jupyter::Channel channel, const std::string& type);
  ExecResult TakeResult();

  KernelContext context_;
  std::string session_id_;
  Events events_;
  std::string runtime_dir_;
  std::unique_ptr<run::Execution> execution_;
  std::optional<jupyter::Connection> connection_;  // written by Spawn
  std::unique_ptr<jupyter::KernelClient> client_;
  std::unique_ptr<Alarm> alarm_;      // readiness bound; an execution's deadline and grace
  std::unique_ptr<Alarm> heartbeat_;  // heartbeat pings; readiness retries
  std::unique_ptr<Alarm> interrupt_;  // the grace after an API interrupt
  Phase phase_ = Phase::kStarting;
  End ending_ = End::kExited;
  std::string why_;
  std::string execution_state_ = "starting";
  bool busy_hint_ = false;  // a relayed execute_request is not answered by idle yet
  bool info_ = false;
  std::set<std::string> info_requests_;  // our kernel_info_requests while starting
  bool iopub_seen_ = false;
  int starved_retries_ = 0;  // AskInfo calls in a row that could not make a socket
  std::chrono::steady_clock::time_point ping_sent_;
  bool ping_outstanding_ = false;
  std::string output_tail_;  // the kernel process's own stderr/stdout, last bytes

  std::optional<jupyter::ExecuteCollector> collector_;
  ExecRequest request_;
  std::function<void(ExecResult)> exec_done_;
  bool timed_out_ = false;
  bool begun_ = false;          // its execute_input arrived: the kernel handles SIGINT now
  bool interrupt_due_ = false;  // the deadline or budget came before that
  bool output_lost_ = false;    // a reset or the kernel's drops while it ran: a gap
  std::string lost_why_;
  // A kernel_info_request the daemon sent to find out where the kernel is
  // (after a reset, or while it looks busy but publishes nothing), and the
  // execution it was sent during ("" for none). Shell requests are handled
  // in order, and iopub is ordered: once its reply and one of its statuses
  // arrived, everything of that execution has arrived or was dropped.
  std::string probe_;
  std::string probe_for_;
  bool probe_replied_ = false;
  bool probe_published_ = false;
  std::chrono::steady_clock::time_point last_iopub_{};
  std::chrono::steady_clock::time_point reset_noticed_{};
  std::chrono::steady_clock::time_point exec_started_;
};

}  // namespace cordon::session
