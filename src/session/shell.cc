#include "session/shell.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "proc/stat.h"

namespace cordon::session {
namespace {

// Run before anything else: no prompts (they would land in stderr), no
// history file in the workspace, no history expansion of '!' in commands.
constexpr std::string_view kBootstrap =
    "PS1=; PS2=; PS4=; PROMPT_COMMAND=; unset HISTFILE MAILCHECK; set +o history +H\n";

// Commands are written only while the shell waits for input, when its pipe
// is empty; a pipe this large takes any command the API accepts in one
// write, so the loop never blocks on a busy shell.
constexpr int kControlPipeBytes = 1 << 20;

// bash reads its input in blocks (of 1024 or 4096 bytes), and a command's
// line and its end marker lines go in one write while the shell waits, with
// the pipe and bash's buffer empty: its reads are aligned to the start of
// that write. If the markers straddled a block boundary, their tail would
// stay in the pipe while the command runs, where a builtin could read it
// through the shell's saved stdin (`read -u 10`), eating the marker (a hang)
// or learning the nonce (a fake status). So the command's line is padded
// with spaces before its newline until that newline and both marker lines
// lie in one 1024-byte block, hence in one block of any multiple of it.
constexpr size_t kInputBlock = 1024;

void PadToKeepMarkerInOneRead(std::string& line, size_t marker_bytes) {
  const size_t newline = line.size() - 1;
  const size_t first = newline / kInputBlock;
  const size_t last = (newline + marker_bytes) / kInputBlock;
  if (first != last) line.insert(newline, last * kInputBlock - newline, ' ');
}

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

}  // namespace

std::expected<std::unique_ptr<Shell>, contain::AdmitError> Shell::Start(
    sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
    const contain::Probe& probe, contain::Spec spec, std::chrono::milliseconds verify_timeout,
    Events events, ReleaseElsewhere release_elsewhere) {
  auto shell = Spawn(reactor, store, signaller, probe, std::move(spec), verify_timeout,
                     std::move(events), std::move(release_elsewhere));
  if (!shell) return shell;
  if (auto attached = (*shell)->Attach(); !attached) {
    return std::unexpected(contain::AdmitError{
        contain::AdmitError::Kind::kInternal, "", attached.error().message(), {}});
  }
  return shell;
}

std::expected<std::unique_ptr<Shell>, contain::AdmitError> Shell::Spawn(
    sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
    const contain::Probe& probe, contain::Spec spec, std::chrono::milliseconds verify_timeout,
    Events events, ReleaseElsewhere release_elsewhere) {
  auto internal = [](const sys::Error& e) {
    return std::unexpected(
        contain::AdmitError{contain::AdmitError::Kind::kInternal, "", e.message(), {}});
  };
  spec.shell.reset();
  spec.argv = {"/bin/bash", "--noprofile", "--norc", "--noediting", "-i"};
  spec.stdin_bytes.reset();
  spec.limits.timeout_ms.reset();
  // An interactive shell ignores SIGTERM: the tree is killed at once.
  spec.limits.grace_ms = 0;

  std::unique_ptr<Shell> shell(new Shell(reactor, std::move(events)));
  auto pipe = sys::MakePipe();
  if (!pipe) return internal(pipe.error());
  (void)::fcntl(pipe->write.get(), F_SETPIPE_SZ, kControlPipeBytes);  // best effort
  if (auto nb = sys::SetNonBlocking(pipe->write.get()); !nb) return internal(nb.error());

  auto grant = contain::Acquire(spec, probe, store);
  if (!grant) return std::unexpected(grant.error());
  run::ExecutionOptions options;
  Shell* self = shell.get();
  options.on_output = [self](run::StreamId id, std::string_view bytes) {
    self->OnOutput(id, bytes);
  };
  options.verify_timeout = verify_timeout;
  options.stdin_fd = pipe->read.get();
  options.keep_output = false;
  options.release_elsewhere = std::move(release_elsewhere);
  auto execution =
      run::Execution::Spawn(reactor, store, signaller, std::move(*grant), spec, std::move(options),
                            [self](run::RunResult r) { self->OnShellDone(std::move(r)); });
  if (!execution) return internal(execution.error());
  shell->execution_ = std::move(*execution);
  shell->control_ = std::move(pipe->write);
  // pipe->read closes here: only the shell holds the read end, so writing
  // to a shell that is gone fails (EPIPE) instead of filling the pipe.
  return shell;
}

sys::Result<void> Shell::Attach() {
  CORDON_ASSIGN_OR_RETURN(alarm_, Alarm::Create(reactor_));
  CORDON_ASSIGN_OR_RETURN(interrupt_alarm_, Alarm::Create(reactor_));
  CORDON_RETURN_IF_ERROR(execution_->Attach());
  std::string nonce = NewNonce();
  out_frame_.Expect(nonce, true);
  err_frame_.Expect(nonce, false);
  Send(std::string(kBootstrap) + MarkerDescriptors() + MarkerLines(nonce));
  return {};
}

Shell::~Shell() = default;

void Shell::Send(const std::string& text) {
  ssize_t n = ::write(control_.get(), text.data(), text.size());
  if (n == static_cast<ssize_t>(text.size())) return;
  // The shell is gone (EPIPE) or did not take its input: it cannot be
  // driven any more.
  if (phase_ == Phase::kRunning || phase_ == Phase::kInterrupting) ending_ = End::kInvalidated;
  Kill();
}

void Shell::OnOutput(run::StreamId id, std::string_view bytes) {
  bool stdout_stream = id == run::StreamId::kStdout;
  FrameReader& frame = stdout_stream ? out_frame_ : err_frame_;
  std::optional<run::Capture>& capture = stdout_stream ? out_ : err_;
  frame.Feed(bytes, [&](std::string_view b) {
    if (capture) (void)capture->Append(b);
    if (request_.on_output && running()) request_.on_output(b);
  });
  if (out_frame_.done() && err_frame_.done()) OnFramed();
}

void Shell::OnFramed() {
  std::optional<int> status = out_frame_.status();
  out_frame_.Reset();
  err_frame_.Reset();
  if (phase_ == Phase::kStarting) {
    phase_ = Phase::kIdle;
    if (events_.ready) events_.ready();
    return;
  }
  if (phase_ != Phase::kRunning && phase_ != Phase::kInterrupting) return;
  alarm_->Cancel();
  interrupt_alarm_->Cancel();
  if (interrupted_) (void)execution_->SignalGroupStartedSince(SIGINT, exec_started_ticks_);
  phase_ = Phase::kIdle;
  ExecResult result = TakeResult();
  result.exit_code = status;
  std::function<void(ExecResult)> done = std::move(exec_done_);
  done(std::move(result));
}

ExecResult Shell::TakeResult() {
  request_.on_output = nullptr;  // what it holds is the caller's: not kept past the end
  ExecResult r;
  for (auto* c : {&out_, &err_}) {
    if (*c) (void)(*c)->Finish();
  }
  // Taken, not copied: a 10 MiB stream would otherwise be held twice.
  if (out_) r.out = run::StreamResult{out_->Take(), out_->truncated(), out_->total_bytes()};
  if (err_) r.err = run::StreamResult{err_->Take(), err_->truncated(), err_->total_bytes()};
  out_.reset();
  err_.reset();
  r.timed_out = timed_out_;
  r.duration_ms = MsSince(exec_started_);
  return r;
}

void Shell::Exec(ExecRequest request, std::function<void(ExecResult)> done) {
  request_ = std::move(request);
  exec_done_ = std::move(done);
  phase_ = Phase::kRunning;
  ++serial_;
  timed_out_ = false;
  interrupted_ = false;
  exec_started_ = std::chrono::steady_clock::now();
  exec_started_ticks_ = proc::TicksSinceBoot();
  out_.emplace(request_.output_limit);
  err_.emplace(request_.output_limit);
  std::string nonce = NewNonce();
  out_frame_.Expect(nonce, true);
  err_frame_.Expect(nonce, false);
  std::string line = "eval " + AnsiCQuote(request_.command);
  line += request_.stdin_bytes
              ? " < <(builtin printf %s " + AnsiCQuote(*request_.stdin_bytes) + ")\n"
              : " < /dev/null\n";
  alarm_->Set(request_.timeout, [this] { OnDeadline(); });
  std::string marker = MarkerLines(nonce);
  static_assert(kInputBlock > 256, "the marker lines must fit in one block");
  PadToKeepMarkerInOneRead(line, marker.size());
  Send(line + marker);
}

bool Shell::Interrupt() {
  if (!running()) return false;
  return SendInterrupt(serial_, static_cast<int>(std::chrono::seconds(1) / kInterruptRepeat));
}

bool Shell::SendInterrupt(uint64_t serial, int repeats) {
  if (!running() || serial != serial_) return false;
  bool sent = execution_->Interrupt(SIGINT).has_value();
  interrupted_ = interrupted_ || sent;
  if (repeats > 0) {
    interrupt_alarm_->Set(kInterruptRepeat,
                          [this, serial, repeats] { SendInterrupt(serial, repeats - 1); });
  }
  return sent;
}

// The timeout ladder: SIGINT (repeated through the grace), then a grace for
// the shell to come back.
void Shell::OnDeadline() {
  if (phase_ != Phase::kRunning) return;
  timed_out_ = true;
  phase_ = Phase::kInterrupting;
  SendInterrupt(serial_, static_cast<int>(request_.grace / kInterruptRepeat));
  alarm_->Set(request_.grace, [this] {
    if (phase_ != Phase::kInterrupting) return;
    ending_ = End::kInvalidated;
    Kill();
  });
}

void Shell::Kill() {
  if (phase_ == Phase::kEnding || phase_ == Phase::kEnded) return;
  if (ending_ != End::kInvalidated) ending_ = End::kKilled;
  phase_ = Phase::kEnding;
  alarm_->Cancel();
  interrupt_alarm_->Cancel();
  execution_->Cancel();
}

void Shell::OnShellDone(run::RunResult run) {
  bool was_running = running() || (phase_ == Phase::kEnding && exec_done_);
  if (phase_ != Phase::kEnding) ending_ = End::kExited;
  phase_ = Phase::kEnded;
  alarm_->Cancel();
  interrupt_alarm_->Cancel();
  Ended ended{ending_, std::move(run), std::nullopt, nullptr, ""};
  if (was_running && exec_done_) {
    auto sink = [](std::optional<run::Capture>& c) {
      return [&c](std::string_view b) {
        if (c) (void)c->Append(b);
      };
    };
    out_frame_.Flush(sink(out_));
    err_frame_.Flush(sink(err_));
    ExecResult r = TakeResult();
    if (ended.run.exit_code) {
      r.exit_code = ended.run.exit_code;
    } else if (ended.run.signal && ending_ == End::kExited) {
      r.exit_code = 128 + *ended.run.signal;
    }
    ended.exec = std::move(r);
    ended.exec_done = std::move(exec_done_);
  }
  out_frame_.Reset();
  err_frame_.Reset();
  control_.reset();
  events_.ended(std::move(ended));
}

void Shell::RetryRelease(std::function<void(const contain::Release&)> retried) {
  execution_->RetryRelease(std::move(retried));
}

}  // namespace cordon::session
