// cordon mcp: the MCP server on stdin and stdout (src/mcp/stdio.h), over
// the same engine, state directory, recovery and bounds as `cordon serve`,
// whose options it takes (all but --listen).
//
// Python sessions need libzmq, which the static `cordon` cannot hold: as
// `cordon serve` does, it execs `cordon-serve mcp` from its own directory
// with the same arguments (before reading stdin, so nothing is lost). Without
// that binary it runs here, with shell sessions only, and says so on stderr.
#include "api/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/serve_command.h"
#include "mcp/stdio.h"

namespace cordon::cli {

Command AddMcpCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "mcp",
      "Serve MCP (the Model Context Protocol) on stdin and stdout: runs, sessions and their "
      "files as tools (docs/mcp.md). Takes cordon serve's options but --listen; logs go to "
      "stderr. stdin EOF or SIGTERM tears everything down and exits 0.");
  auto options = AddDaemonOptions(cmd, "mcp");
  return Command{cmd, [options] {
                   auto o = options();
                   if (!o) return kExitCordonFailed;
                   if (McpWithKernels()) return McpWithKernels()(std::move(*o));
                   ExecKernelServe();  // returns only when cordon-serve is not there
                   api::Log("warning", "no_kernels",
                            {{"message",
                              "cordon-serve was not found next to this binary: python "
                              "sessions are not available"}});
                   return mcp::ServeStdio(std::move(*o));
                 }};
}

}  // namespace cordon::cli
