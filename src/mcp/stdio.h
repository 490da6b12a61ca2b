// `cordon mcp`: the MCP server on stdin and stdout (newline-delimited
// JSON-RPC, one message a line; stdout carries nothing else, logs go to
// stderr) over an in-process daemon that listens nowhere: the same store,
// recovery at start, bounds and engine as `cordon serve`.
#pragma once

#include "api/daemon.h"

namespace cordon::mcp {

// Runs until stdin ends (EOF) or SIGTERM/SIGINT, then tears every run and
// session down (verified) and returns 0, or 1 when some teardown could not
// be verified or the daemon could not start.
int ServeStdio(api::DaemonOptions options);

}  // namespace cordon::mcp
