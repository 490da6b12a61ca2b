#include "sys/signalfd.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cstring>

namespace cordon::sys {

std::vector<int> CatchableEndingSignals() {
  std::vector<int> signals = {SIGHUP,    SIGINT,  SIGQUIT, SIGUSR1,   SIGUSR2, SIGALRM, SIGTERM,
                              SIGSTKFLT, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,   SIGPWR};
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) signals.push_back(sig);
  return signals;
}

std::string SignalName(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  }
  if (const char* name = ::sigabbrev_np(sig); name != nullptr) return std::string("SIG") + name;
  return "signal " + std::to_string(sig);
}

Result<SignalFd> SignalFd::Create(std::span<const int> signals) {
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
