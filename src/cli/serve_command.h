// How `cordon serve` gets a daemon with kernels (see serve_command.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "api/daemon.h"

namespace cordon::cli {

// Set by cordon-serve's main: runs the daemon with python sessions and the
// Kernel Gateway surface. Unset in the static `cordon`.
std::function<int(api::DaemonOptions)>& ServeWithKernels();

// The daemon's options as `cordon serve` takes them (its defaults, bounds
// and state directory), registered on `cmd` for another command (`cordon
// mcp`, named `command` in errors), without listening: --listen is refused.
// Called after parsing, the function gives the options, or prints the
// error naming the option and gives none.
std::function<std::optional<api::DaemonOptions>()> AddDaemonOptions(CLI::App* cmd,
                                                                    std::string command);

// Set by cordon-serve's main: `cordon mcp` with python sessions. Unset in
// the static `cordon`.
std::function<int(api::DaemonOptions)>& McpWithKernels();

// Replaces this process with cordon-serve from the same directory, with
// the same arguments; returns only when that is not possible.
void ExecKernelServe();

}  // namespace cordon::cli
