// Process file descriptors: the only way cordon signals and waits for a
// process. A pidfd keeps naming the same process even after its pid is
// recycled, so a signal sent through it can never reach another process.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>

#include "sys/fd.h"

namespace cordon::sys {

// How a child ended, as waitid reported it.
struct ChildExit {
  bool signaled = false;  // false: exited with `status`; true: killed by signal `status`
  int status = 0;
  bool core_dumped = false;
  struct rusage usage {};  // the child's and its reaped descendants'
};

class PidFd final {
 public:
  PidFd() = default;
  PidFd(UniqueFd fd, pid_t pid) : fd_(std::move(fd)), pid_(pid) {}

  // pidfd_open(pid). Fails with ESRCH when no such process exists.
  static Result<PidFd> Open(pid_t pid);

  int fd() const { return fd_.get(); }
  pid_t pid() const { return pid_; }
  bool valid() const { return fd_.valid(); }

  // pidfd_send_signal. ESRCH (the process has exited) is reported as an error.
  Result<void> SendSignal(int sig) const;

  // True once the process has terminated (its pidfd polls readable).
  bool HasExited() const;

  // For a child of this process: reaps it with waitid(P_PIDFD, WEXITED|WNOHANG).
  // Empty while it is still running.
  Result<std::optional<ChildExit>> TryReap() const { return Wait(true); }
  // Waits for the child to exit and reaps it.
  Result<ChildExit> Reap() const;

 private:
  Result<std::optional<ChildExit>> Wait(bool nohang) const;

  UniqueFd fd_;
  pid_t pid_ = -1;
};

// kill(-pgid, sig) for the process group that `leader` leads. Safe only
// while `leader` is this process's unreaped child: until it is reaped its
// pid, and so the group's number, cannot be recycled. Refuses the caller's
// own process group (the supervisor never signals itself) and a leader that
// has already exited.
Result<void> SignalProcessGroup(const PidFd& leader, pid_t pgid, int sig);

}  // namespace cordon::sys
