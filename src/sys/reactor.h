// The event-loop interface the I/O pump and teardown are written against.
// Everything they wait for is a readable descriptor (pipes, pidfds, timerfds),
// so one component runs unchanged on the CLI's epoll loop and on the daemon's
// Asio loop: each front door supplies its own Reactor.
#pragma once

#include <functional>

#include "sys/error.h"

namespace cordon::sys {

class Reactor {
 public:
  using Handler = std::function<void()>;
  virtual ~Reactor() = default;

  // Calls `on_readable` each time `fd` is readable, hung up or in error
  // (level-triggered) until Unwatch(fd). The caller keeps owning `fd` and
  // must Unwatch it before closing it. Handlers may Watch and Unwatch
  // (themselves included) and must tolerate a spurious wake-up.
  virtual Result<void> Watch(int fd, Handler on_readable) = 0;
  virtual void Unwatch(int fd) = 0;
};

}  // namespace cordon::sys
