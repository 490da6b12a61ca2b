// A one-shot monotonic timer as a descriptor, so deadlines are just another
// readable fd for the Reactor.
#pragma once

#include <chrono>

#include "sys/fd.h"

namespace cordon::sys {

class TimerFd final {
 public:
  static Result<TimerFd> Create();

  int fd() const { return fd_.get(); }
  // Fires once, `after` from now (a zero or negative duration fires at once).
  Result<void> Arm(std::chrono::nanoseconds after);
  Result<void> Disarm();
  // Clears the readable state after it fired; returns whether it had fired.
  bool Consume();

 private:
  explicit TimerFd(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace cordon::sys
