// The init (pid 1) of a sandbox's pid namespace. It exists because pid 1
// is special: it reaps orphans (without it they would stay zombies), and
// when it exits the kernel kills everything else in the namespace, which
// is what makes "the namespace is gone" a verified death. It forwards
// SIGTERM and SIGHUP to the command (SIGINT, sent to the whole group, the
// command has already; the init only keeps it from killing itself), and
// when the command exits it reports the command's wait status to the
// supervisor and exits itself.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>
#include <optional>

#include "sys/pidfd.h"

namespace cordon::contain {

// Child side, async-signal-safe. Called by the init before it forks the
// command: makes the init undumpable (so that the command can never read
// or steer it through /proc/1 or ptrace, not even in its first
// instructions), and blocks the signals it waits for from then on (a
// SIGTERM in between is kept pending, not lost). The command unblocks them.
int BlockInitSignals();
int UnblockSignals();

// Closes every descriptor but the `count` in `keep` (sorted in place; -1
// entries are ignored). Async-signal-safe.
void CloseAllBut(int* keep, size_t count);

// The init's life after the fork: keeps only `status_fd` and `keep_fd`
// (the id lease), gives up its own privileges, then reaps and forwards
// until `command` exits. Never returns.
[[noreturn]] void RunInit(pid_t command, int status_fd, int keep_fd);

// Supervisor side: the command's exit as the init reported it, once the
// init has exited. Empty when the init died without a report (killed).
std::optional<sys::ChildExit> ReadInitReport(int status_fd);

}  // namespace cordon::contain
