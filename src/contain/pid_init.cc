#include "contain/pid_init.h"

#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "contain/privileges.h"

namespace cordon::contain {
namespace {

constexpr int kInitSignals[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};

void InitSignalSet(sigset_t* set) {
  sigemptyset(set);
  for (int sig : kInitSignals) sigaddset(set, sig);
}

}  // namespace

void CloseAllBut(int* keep, size_t count) {
  // Sorted in place (a few entries: insertion sort, no allocation).
  for (size_t i = 1; i < count; ++i) {
    for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; --j) std::swap(keep[j - 1], keep[j]);
  }
  unsigned from = 0;
  for (size_t i = 0; i < count; ++i) {
    if (keep[i] < 0 || static_cast<unsigned>(keep[i]) < from) continue;
    if (static_cast<unsigned>(keep[i]) > from) ::syscall(SYS_close_range, from, keep[i] - 1, 0);
    from = static_cast<unsigned>(keep[i]) + 1;
  }
  ::syscall(SYS_close_range, from, ~0U, 0);
}

int BlockInitSignals() {
  // Undumpable before the command exists, not after (runc CVE-2016-9962):
  // from the command's first instruction, /proc/1/{mem,environ,fd} and
  // ptrace of the init need privileges the command never has. (The
  // command shares this memory until its execve, so it is undumpable too
  // while it sets up; execve gives it a memory of its own, dumpable as
  // usual.)
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno;
  sigset_t set;
  InitSignalSet(&set);
  return ::sigprocmask(SIG_BLOCK, &set, nullptr) == 0 ? 0 : errno;
}

int UnblockSignals() {
  sigset_t none;
  sigemptyset(&none);
  return ::sigprocmask(SIG_SETMASK, &none, nullptr) == 0 ? 0 : errno;
}

void RunInit(pid_t command, int status_fd, int keep_fd) {
  // Nothing of the command's: not its pipes (their EOF must not wait for
  // us), not the setup pipe (its EOF tells the supervisor execve worked).
  int keep[] = {status_fd, keep_fd};
  CloseAllBut(keep, 2);
  // (Undumpable since BlockInitSignals, before the fork: the command runs
  // as the same uid, and could otherwise open /proc/1/mem and steer it.)
  // Best effort: the init has nothing the command lacks once it also
  // gives up what the namespace granted it. (No seccomp filter of its own:
  // it makes four kinds of system call, nothing can steer it, and
  // attaching a filter costs as much as the rest of its setup.)
  (void)DropCapabilities();
  (void)SetNoNewPrivs();

  sigset_t set;
  InitSignalSet(&set);
  for (;;) {
    siginfo_t info;
    int sig = ::sigwaitinfo(&set, &info);
    if (sig == SIGCHLD) {
      int status = 0;
      pid_t pid;
      while ((pid = ::wait4(-1, &status, WNOHANG | __WALL, nullptr)) > 0) {
        if (pid != command) continue;  // an orphan: reaped, nothing more
        (void)!::write(status_fd, &status, sizeof status);
        // Exiting kills whatever the command left in the namespace.
        ::_exit(0);
      }
    } else if (sig > 0 && sig != SIGINT) {
      // SIGINT is not forwarded: it is sent to the whole process group (a
      // terminal's Ctrl-C, a session's interrupt), which the command is in,
      // so it has it already. A forwarded copy would be a second SIGINT a
      // moment later, landing in whatever the first one started (the
      // shell's end marker, the kernel's KeyboardInterrupt handling).
      ::kill(command, sig);
    }
  }
}

std::optional<sys::ChildExit> ReadInitReport(int status_fd) {
  int status = 0;
  ssize_t n;
  do {
    n = ::read(status_fd, &status, sizeof status);
  } while (n < 0 && errno == EINTR);
  if (n != sizeof status) return std::nullopt;
  sys::ChildExit exit;
  if (WIFSIGNALED(status)) {
    exit.signaled = true;
    exit.status = WTERMSIG(status);
    exit.core_dumped = WCOREDUMP(status);
  } else {
    exit.status = WEXITSTATUS(status);
  }
  return exit;
}

}  // namespace cordon::contain
