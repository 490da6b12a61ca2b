// The subcommands: each registers its options on the CLI11 app and runs
// after parsing. They are thin: every rule lives in the library.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace cordon::cli {

struct Command {
  CLI::App* app;
  // Runs the subcommand after a successful parse; returns the exit status.
  std::function<int()> run;
};

Command AddRunCommand(CLI::App& app);
Command AddProbeCommand(CLI::App& app);
Command AddGrantsCommand(CLI::App& app);
Command AddReapCommand(CLI::App& app);
Command AddClosureCommand(CLI::App& app);
Command AddAttestCommand(CLI::App& app);
Command AddSignalCommand(CLI::App& app);
Command AddServeCommand(CLI::App& app);
Command AddMcpCommand(CLI::App& app);

}  // namespace cordon::cli
