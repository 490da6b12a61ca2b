#include "sys/pidfd.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace cordon::sys {

Result<PidFd> PidFd::Open(pid_t pid) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return FailErrno("pidfd_open(" + std::to_string(pid) + ")");
  // pidfd_open sets O_CLOEXEC itself.
  return PidFd(UniqueFd(fd), pid);
}

Result<void> PidFd::SendSignal(int sig) const {
  if (::syscall(SYS_pidfd_send_signal, fd_.get(), sig, nullptr, 0) != 0) {
    return FailErrno("pidfd_send_signal(" + std::to_string(pid_) + ", " + std::to_string(sig) +
                     ")");
  }
  return {};
}

bool PidFd::HasExited() const {
  struct pollfd p = {.fd = fd_.get(), .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
}

Result<ChildExit> PidFd::Reap() const {
  CORDON_ASSIGN_OR_RETURN(std::optional<ChildExit> exit, Wait(false));
  if (!exit) return Fail("waitid(P_PIDFD, " + std::to_string(pid_) + "): no child", ECHILD);
  return *exit;
}

Result<std::optional<ChildExit>> PidFd::Wait(bool nohang) const {
  siginfo_t info{};
  ChildExit exit;
  // The raw system call takes a fifth argument, the rusage, which glibc's
  // waitid wrapper does not expose.
  long rc;
  do {
    rc = ::syscall(SYS_waitid, P_PIDFD, fd_.get(), &info, WEXITED | (nohang ? WNOHANG : 0),
                   &exit.usage);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return FailErrno("waitid(P_PIDFD, " + std::to_string(pid_) + ")");
  if (info.si_pid == 0) return std::nullopt;
  switch (info.si_code) {
    case CLD_EXITED:
      exit.status = info.si_status;
      break;
    case CLD_DUMPED:
      exit.core_dumped = true;
      [[fallthrough]];
    default:
      exit.signaled = true;
      exit.status = info.si_status;
  }
  return exit;
}

Result<void> SignalProcessGroup(const PidFd& leader, pid_t pgid, int sig) {
  const std::string what = "kill(-" + std::to_string(pgid) + ", " + std::to_string(sig) + ")";
  if (pgid <= 1 || pgid == ::getpgrp()) return Fail(what + ": the supervisor's own group", EPERM);
  if (leader.HasExited()) return Fail(what + ": the leader has exited", ESRCH);
  if (::kill(-pgid, sig) != 0) return FailErrno(what);
  return {};
}

}  // namespace cordon::sys
