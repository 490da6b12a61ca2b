// A small single-threaded Reactor on epoll, for the CLI and for tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "sys/fd.h"
#include "sys/reactor.h"

namespace cordon::sys {

class EpollReactor final : public Reactor {
 public:
  static Result<EpollReactor> Create();

  Result<void> Watch(int fd, Handler on_readable) override;
  // Calls `on_writable` each time `fd` can be written, or is in error,
  // until Unwatch(fd). The CLI's own output; not part of Reactor.
  Result<void> WatchWritable(int fd, Handler on_writable);
  void Unwatch(int fd) override;

  // Dispatches events until `done()` is true. Fails if epoll_wait fails or
  // nothing is watched while `done()` is still false (it would wait forever).
  Result<void> RunUntil(const std::function<bool()>& done);

 private:
  struct Entry {
    uint64_t token;
    std::shared_ptr<Handler> handler;
  };
  explicit EpollReactor(UniqueFd epoll) : epoll_(std::move(epoll)) {}
  Result<void> Add(int fd, uint32_t events, Handler handler);

  UniqueFd epoll_;
  uint64_t next_token_ = 1;
  // Events carry a token, not the fd, so a stale event for a descriptor that
  // was unwatched (and whose number was reused) in the same batch is ignored.
  std::unordered_map<int, Entry> entries_;
  std::unordered_map<uint64_t, int> fd_by_token_;
};

}  // namespace cordon::sys
