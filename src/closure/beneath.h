// Opening and walking files beneath a directory fd without ever following a
// symbolic link: a closure is judged by what is inside its directory, and a
// link could point anywhere (or be swapped to point elsewhere between a
// check and a use).
//
// Paths are resolved one component at a time with O_NOFOLLOW (rather than
// openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, Linux 5.6+) so that it
// works on every kernel and a failure can name the component at fault. The
// paths given must already be valid manifest paths (no "..", no "." and no
// empty segments; see PathProblem), so nothing can climb out of `dir_fd`.
#pragma once

#include <sys/stat.h>

#include <expected>
#include <functional>
#include <string>
#include <vector>

#include "closure/rule.h"
#include "sys/fd.h"

namespace cordon::closure {

struct OpenedFile {
  sys::UniqueFd fd;  // O_RDONLY | O_CLOEXEC, blocking; the file offset is 0
  struct stat st;    // fstat of `fd`, taken right after it was opened
};

// Opens the regular file `rel` beneath `dir_fd`. Fails with missing, symlink
// (the file or any directory on the way), not_regular, changed_while_reading
// (the name was replaced between the type check and the open) or unreadable.
std::expected<OpenedFile, Failure> OpenRegularBeneath(int dir_fd, const std::string& rel);

// The same for one name in `parent_fd`; `rel` is only for messages.
std::expected<OpenedFile, Failure> OpenRegularAt(int parent_fd, const std::string& name,
                                                 const std::string& rel);

struct WalkItem {
  int parent_fd;            // valid only during the visit
  const std::string& name;  // within the parent
  const std::string& path;  // relative to the walk's root, '/'-separated
  const struct stat& st;    // lstat: a symlink is seen as a symlink
};

// Visits everything beneath `dir_fd` (not following symlinks), names sorted
// bytewise within each directory. The visitor returns true to descend into a
// directory. A directory that cannot be opened or listed is added to
// `problems` (rule unreadable, or symlink if it was swapped for one) and the
// walk goes on.
void Walk(int dir_fd, const std::function<bool(const WalkItem&)>& visit,
          std::vector<Failure>& problems);

// "a directory", "a FIFO", ...: what a non-regular file is, for messages.
std::string FileTypeName(mode_t mode);

}  // namespace cordon::closure
