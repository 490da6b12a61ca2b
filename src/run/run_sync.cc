#include "run/run_sync.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "sys/epoll_reactor.h"
#include "sys/signalfd.h"

namespace cordon::run {
namespace {

contain::AdmitError Internal(const sys::Error& e) {
  return contain::AdmitError{contain::AdmitError::Kind::kInternal, "", e.message(), {}};
}

// SyncOptions::pass_through: cordon's stdout and stderr, written without
// blocking. Their open file descriptions are shared (with the shell, a
// pager), so O_NONBLOCK is not set on them: a pipe or a terminal is opened
// again, non-blocking, through /proc; a socket is sent to with
// MSG_DONTWAIT. Anything else (a file) is written as it is.
class PassThrough {
 public:
  explicit PassThrough(sys::EpollReactor& reactor) : reactor_(reactor) {
    for (Sink& s : sinks_) Open(s);
  }
  ~PassThrough() {
    for (Sink& s : sinks_) StopWatching(s);
  }
  PassThrough(const PassThrough&) = delete;
  PassThrough& operator=(const PassThrough&) = delete;

  // Where a reader that went away is told (Execution::CloseOutput).
  void Attach(Execution* execution) { execution_ = execution; }

  void Write(StreamId id, std::string_view bytes) {
    Sink& s = sinks_[id == StreamId::kStdout ? 0 : 1];
    if (s.broken) return;
    s.pending.append(bytes);
    Drain(s);
  }

  // After the run: what still waits, written blocking (signals are no
  // longer held, so a SIGTERM ends the wait).
  void Finish() {
    execution_ = nullptr;
    for (Sink& s : sinks_) {
      StopWatching(s);
      if (!s.broken) (void)sys::WriteAll(s.fd, std::string_view(s.pending).substr(s.written));
      s.pending.clear();
    }
  }

 private:
  struct Sink {
    int fd;
    StreamId id;
    sys::UniqueFd nonblocking;  // fd opened again with O_NONBLOCK
    bool socket = false;
    std::string pending;
    size_t written = 0;  // of `pending`
    bool watched = false;
    bool broken = false;
  };

  static void Open(Sink& s) {
    struct stat st {};
    if (::fstat(s.fd, &st) != 0) return;
    s.socket = S_ISSOCK(st.st_mode);
    if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) return;
    std::string path = "/proc/self/fd/" + std::to_string(s.fd);
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) s.nonblocking.reset(fd);
  }

  static ssize_t Send(const Sink& s, std::string_view bytes) {
    if (s.socket) return ::send(s.fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    return ::write(s.nonblocking ? s.nonblocking.get() : s.fd, bytes.data(), bytes.size());
  }

  void Drain(Sink& s) {
    while (s.written < s.pending.size()) {
      ssize_t n = Send(s, std::string_view(s.pending).substr(s.written));
      if (n >= 0) {
        s.written += static_cast<size_t>(n);
      } else if (errno == EAGAIN) {
        if (!s.watched)
          s.watched = reactor_.WatchWritable(s.fd, [this, &s] { Drain(s); }).has_value();
        return;
      } else if (errno != EINTR) {
        Break(s);
        return;
      }
    }
    s.pending.clear();
    s.written = 0;
    StopWatching(s);
  }

  void Break(Sink& s) {
    s.broken = true;
    s.pending.clear();
    s.written = 0;
    StopWatching(s);
    if (execution_) execution_->CloseOutput(s.id);
  }

  void StopWatching(Sink& s) {
    if (s.watched) reactor_.Unwatch(s.fd);
    s.watched = false;
  }

  sys::EpollReactor& reactor_;
  Execution* execution_ = nullptr;
  Sink sinks_[2] = {{STDOUT_FILENO, StreamId::kStdout}, {STDERR_FILENO, StreamId::kStderr}};
};

}  // namespace

std::expected<SyncResult, contain::AdmitError> RunSync(const contain::Spec& spec,
                                                       const contain::Probe& probe,
                                                       store::Store& store,
                                                       const SyncOptions& options) {
  auto reactor = sys::EpollReactor::Create();
  if (!reactor) return std::unexpected(Internal(reactor.error()));
  std::optional<sys::SignalFd> signals;
  if (options.cancel_on_signals) {
    // Blocked before anything is spawned, so a Ctrl-C (or any signal that
    // would end the supervisor) cannot kill it between admission and
    // teardown, leaving the tree running. One that is ignored (nohup's
    // SIGHUP, SIGPIPE) stays ignored: the kernel drops it unqueued.
    auto fd = sys::SignalFd::Create(sys::CatchableEndingSignals());
    if (!fd) return std::unexpected(Internal(fd.error()));
    signals.emplace(std::move(*fd));
  }

  auto grant = contain::Acquire(spec, probe, store);
  if (!grant) return std::unexpected(grant.error());

  std::optional<PassThrough> pass_through;
  ExecutionOptions execution_options = options.execution;
  if (options.pass_through) {
    pass_through.emplace(*reactor);
    execution_options.on_output = [&](StreamId id, std::string_view bytes) {
      pass_through->Write(id, bytes);
    };
  }
  contain::KernelSignaller kernel;
  contain::Signaller& signaller = options.signaller ? *options.signaller : kernel;
  SyncResult out;
  bool done = false;
  Execution* current = nullptr;
  if (signals) {
    auto watched = reactor->Watch(signals->fd(), [&] {
      if (int sig = signals->Read(); sig != 0 && out.cancel_signal == 0) {
        out.cancel_signal = sig;
        if (current) current->Cancel();
      }
    });
    if (!watched) return std::unexpected(Internal(watched.error()));
  }
  auto execution = Execution::Start(*reactor, store, signaller, std::move(*grant), spec,
                                    std::move(execution_options), [&](RunResult r) {
                                      out.result = std::move(r);
                                      done = true;
                                    });
  if (!execution) return std::unexpected(Internal(execution.error()));
  current = execution->get();
  if (pass_through) pass_through->Attach(current);
  if (auto ran = reactor->RunUntil([&] { return done; }); !ran) {
    return std::unexpected(Internal(ran.error()));
  }
  if (signals) reactor->Unwatch(signals->fd());
  signals.reset();
  if (pass_through) pass_through->Finish();
  return out;
}

}  // namespace cordon::run
