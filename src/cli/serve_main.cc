// cordon-serve: `cordon serve` with kernels. The static `cordon` execs it
// (serve_command.cc); it takes the same arguments ("serve" first, which may
// be left out).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "api/serve.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/serve_command.h"
#include "gateway/gateway.h"
#include "mcp/stdio.h"

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() < 2 || (args[1] != "serve" && args[1] != "mcp")) {
    args.insert(args.begin() + 1, "serve");
  }
  std::vector<char*> pointers;
  for (auto& a : args) pointers.push_back(a.data());

  cordon::cli::ServeWithKernels() = [](cordon::api::DaemonOptions options) {
    options.extension = cordon::gateway::Maker(options.gateway);
    return cordon::api::Serve(std::move(options));
  };
  cordon::cli::McpWithKernels() = [](cordon::api::DaemonOptions options) {
    options.extension = cordon::gateway::Maker(options.gateway);
    return cordon::mcp::ServeStdio(std::move(options));
  };
  CLI::App app{"cordon-serve: the cordon daemon with python sessions and the Kernel Gateway API",
               "cordon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(CORDON_VERSION));
  cordon::cli::Command serve = cordon::cli::AddServeCommand(app);
  cordon::cli::Command mcp = cordon::cli::AddMcpCommand(app);
  try {
    app.parse(static_cast<int>(pointers.size()), pointers.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    cordon::cli::PrintError("serve", std::string(e.what()) + " (see cordon serve --help)");
    return cordon::cli::kExitCordonFailed;
  }
  return mcp.app->parsed() ? mcp.run() : serve.run();
}
