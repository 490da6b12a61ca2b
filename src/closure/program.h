// Which verified file of a closure a program path names, decided once, on
// an opened file: a launcher symlink is resolved by opening it, and what it
// resolved to must be the very inode that was verified. The program then
// runs from the verified descriptor (execveat), so a path or link changed
// after the check cannot change what runs.
#pragma once

#include <expected>
#include <string>

#include "closure/rule.h"
#include "closure/verify.h"

namespace cordon::closure {

struct ClosureProgram {
  std::string path;     // the entry, as listed
  int fd = -1;          // the verified descriptor; owned by the Verification
  bool script = false;  // starts with "#!": its interpreter reads it through /dev/fd
};

// Reads the manifest `dir` keeps at kManifestPath, checks it against `pin`
// and verifies the directory. A manifest that is missing, malformed or not
// the pinned one is a failure in the Verification, like any other; an
// Error only when `dir` itself cannot be opened.
sys::Result<Verification> VerifyPinnedDir(const std::string& dir, std::string_view pin);

// `program` relative: a path within `dir`; absolute: any path (a symlink,
// say) that resolves to one of the verified files.
std::expected<ClosureProgram, Failure> ResolveProgram(const Verification& verified,
                                                      const std::string& dir,
                                                      const std::string& program);

}  // namespace cordon::closure
