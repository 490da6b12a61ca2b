#include "sys/signalfd.h"

#include <sys/signalfd.h>
#include <unistd.h>

namespace cordon::sys {

Result<SignalFd> SignalFd::Create(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  sigset_t saved;
  if (::pthread_sigmask(SIG_BLOCK, &set, &saved) != 0) return Fail("pthread_sigmask", EINVAL);
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) {
    auto error = FailErrno("signalfd");
    ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    return error;
  }
  return SignalFd(UniqueFd(fd), saved);
}

SignalFd::SignalFd(SignalFd&& other) noexcept
    : fd_(std::move(other.fd_)), saved_(other.saved_), restore_(other.restore_) {
  other.restore_ = false;
}

SignalFd::~SignalFd() {
  if (restore_) ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

int SignalFd::Read() {
  struct signalfd_siginfo info {};
  if (::read(fd_.get(), &info, sizeof info) != sizeof info) return 0;
  return static_cast<int>(info.ssi_signo);
}

}  // namespace cordon::sys
