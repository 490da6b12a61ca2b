#include "run/run_sync.h"

#include <optional>

#include "sys/epoll_reactor.h"
#include "sys/signalfd.h"

namespace cordon::run {
namespace {

contain::AdmitError Internal(const sys::Error& e) {
  return contain::AdmitError{contain::AdmitError::Kind::kInternal, "", e.message(), {}};
}

}  // namespace

std::expected<SyncResult, contain::AdmitError> RunSync(const contain::Spec& spec,
                                                       const contain::Probe& probe,
                                                       store::Store& store,
                                                       const SyncOptions& options) {
  auto reactor = sys::EpollReactor::Create();
  if (!reactor) return std::unexpected(Internal(reactor.error()));
  std::optional<sys::SignalFd> signals;
  if (options.cancel_on_signals) {
    // Blocked before anything is spawned, so a Ctrl-C cannot kill the
    // supervisor between admission and teardown.
    auto fd = sys::SignalFd::Create({SIGINT, SIGTERM, SIGHUP});
    if (!fd) return std::unexpected(Internal(fd.error()));
    signals.emplace(std::move(*fd));
  }

  auto grant = contain::Acquire(spec, probe, store);
  if (!grant) return std::unexpected(grant.error());

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
                                    options.execution, [&](RunResult r) {
                                      out.result = std::move(r);
                                      done = true;
                                    });
  if (!execution) return std::unexpected(Internal(execution.error()));
  current = execution->get();
  if (auto ran = reactor->RunUntil([&] { return done; }); !ran) {
    return std::unexpected(Internal(ran.error()));
  }
  if (signals) reactor->Unwatch(signals->fd());
  return out;
}

}  // namespace cordon::run
