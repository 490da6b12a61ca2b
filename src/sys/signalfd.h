// Signals as a readable descriptor: while a SignalFd lives, its signals are
// blocked for this thread and arrive on fd() instead of to handlers.
#pragma once

#include <signal.h>

#include <span>
#include <string>
#include <vector>

#include "sys/fd.h"

namespace cordon::sys {

// The signals that end a process by default and that it can catch: all but
// SIGKILL, those the kernel sends for the process's own faults (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT) and SIGPIPE (a write to
// a reader that left is an error its writer handles). Real-time signals included, from SIGRTMIN
// (the C library keeps the ones below it for itself).
std::vector<int> CatchableEndingSignals();

// "SIGUSR1", "SIGRTMIN+3": a signal's name as kill(1) writes it.
std::string SignalName(int sig);

class SignalFd final {
 public:
  static Result<SignalFd> Create(std::span<const int> signals);
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
