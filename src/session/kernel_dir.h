// The runtime root of python sessions: where each kernel gets a directory
// of its own for its sockets and connection file (kernel.cc). Short, for the
// socket paths: /run/cordon/k-<hash> for a root daemon (src/gateway), the
// state directory's `k` otherwise.
#pragma once

#include <string>

#include "sys/error.h"

namespace cordon::session {

// Makes `root` and whatever of its parents is missing (mode 0711: a
// sandbox's root must traverse it to its own directory, and list nothing),
// and checks that a kernel's directory can be made in it. The error says
// that python sessions cannot start, names the directory and the call that
// failed, and what makes it work (RuntimeRootFix).
sys::Result<void> PrepareRuntimeRoot(const std::string& root);

// What an operator does so that `root` can be made: a writable /run/cordon
// (in a container, a volume of its own there), else a writable state
// directory.
std::string RuntimeRootFix(const std::string& root);

}  // namespace cordon::session
