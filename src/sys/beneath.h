// Opening paths beneath a directory with openat2(2) (Linux 5.6+): the
// kernel resolves the whole path and refuses, atomically, any step that
// would leave the directory (a "..", an absolute symlink, a symlink whose
// target climbs out) and every magic link (/proc/self/fd/N). No check-then-
// use window is left for a process that swaps a component meanwhile.
#pragma once

#include <sys/types.h>

#include <string>

#include "sys/fd.h"

namespace cordon::sys {

// openat2(dir_fd, path, {flags | O_CLOEXEC, mode, RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS}). An escape fails with EXDEV; a magic link with
// ELOOP.
Result<UniqueFd> OpenBeneath(int dir_fd, const std::string& path, int flags, mode_t mode = 0);

}  // namespace cordon::sys
