// Signals as a readable descriptor: while a SignalFd lives, its signals are
// blocked for this thread and arrive on fd() instead of to handlers.
#pragma once

#include <signal.h>

#include <initializer_list>

#include "sys/fd.h"

namespace cordon::sys {

class SignalFd final {
 public:
  static Result<SignalFd> Create(std::initializer_list<int> signals);
  SignalFd(SignalFd&& other) noexcept;
  SignalFd& operator=(SignalFd&&) = delete;
  SignalFd(const SignalFd&) = delete;
  ~SignalFd();  // restores the previous signal mask

  int fd() const { return fd_.get(); }
  // The next pending signal's number, or 0 if none.
  int Read();

 private:
  SignalFd(UniqueFd fd, sigset_t saved) : fd_(std::move(fd)), saved_(saved) {}
  UniqueFd fd_;
  sigset_t saved_;
  bool restore_ = true;
};

}  // namespace cordon::sys
