// Parsing /proc/PID/stat.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sys/error.h"

namespace cordon::proc {

struct Stat {
  pid_t pid = 0;
  std::string comm;  // the command name, which may contain spaces and ')'
  char state = '?';  // R, S, D, Z, X, ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  uint64_t start_ticks = 0;  // field 22: start time after boot, in clock ticks

  // A zombie or dead task: it has exited and only waits to be reaped.
  bool exited() const { return state == 'Z' || state == 'X'; }
};

// Parses the text of /proc/PID/stat. The command name ends at the *last*
// ')' of the line: a name may itself contain ") " and digits.
sys::Result<Stat> ParseStat(std::string_view text);

// Reads /proc/PID/stat (ENOENT/ESRCH when the process is gone).
sys::Result<Stat> ReadStat(pid_t pid);

// Every pid listed in /proc at the time of the call.
sys::Result<std::vector<pid_t>> ListPids();

// Those of `candidates` that are alive, in process group `pgid`, and
// started at or after `since_ticks`, as /proc shows them now.
std::vector<Stat> GroupMembersSince(const std::vector<pid_t>& candidates, pid_t pgid,
                                    uint64_t since_ticks);

// Now, on the clock of Stat::start_ticks (CLOCK_BOOTTIME in clock ticks): a
// process with start_ticks at or above it started at or after the call, or
// at most one tick before.
uint64_t TicksSinceBoot();

}  // namespace cordon::proc
