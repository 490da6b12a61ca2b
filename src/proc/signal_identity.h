// Signalling a process by identity: the only way cordon signals a process it
// did not just clone. The pid is pinned with a pidfd first, and only then is
// the identity checked again, so the process checked is the process
// signalled: a pid recycled in between cannot receive it.
#pragma once

#include <string_view>

#include "proc/identity.h"

namespace cordon::proc {

// Sends `sig` to the process `expected` names if, with its pidfd held, it is
// still that process (same boot, pid, start ticks; same parent when
// `check_parent`) and alive. Returns kNone when the signal was sent, else
// why it was not; an Error only when the system calls themselves fail. The
// pidfd is closed on every path.
sys::Result<Mismatch> SignalIdentity(const Identity& expected, int sig, bool check_parent = false);

// Whether a pidfd still refers to a live process (its fdinfo "Pid:" is not
// -1; the kernel writes -1 once the process has been reaped).
bool PidFdAlive(int pidfd);
// The same, from the text of /proc/self/fdinfo/N (pure: the fuzz target's
// entry).
bool PidFdInfoAlive(std::string_view fdinfo);

}  // namespace cordon::proc
