// How `cordon serve` gets a daemon with kernels (see serve_command.cc).
#pragma once

#include <functional>

#include "api/daemon.h"

namespace cordon::cli {

// Set by cordon-serve's main: runs the daemon with python sessions and the
// Kernel Gateway surface. Unset in the static `cordon`.
std::function<int(api::DaemonOptions)>& ServeWithKernels();

// Replaces this process with cordon-serve from the same directory, with
// the same arguments; returns only when that is not possible.
void ExecKernelServe();

}  // namespace cordon::cli
