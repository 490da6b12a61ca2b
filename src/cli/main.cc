// cordon: the CLI. A thin main over the library.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"

int main(int argc, char** argv) {
  // A closed stdout must not kill the supervisor mid-run (the tree would be
  // left behind); writes fail with EPIPE instead. Children get SIG_DFL back.
  ::signal(SIGPIPE, SIG_IGN);

  CLI::App app{
      "cordon: run untrusted commands inside a containment boundary whose every claim is "
      "observed, not assumed.",
      "cordon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(CORDON_VERSION));

  // Building a subcommand's options costs more than running `cordon run`
  // itself wants to spend, so only the one named is built in full; all are
  // built when none is named (for --help and errors).
  using Adder = cordon::cli::Command (*)(CLI::App&);
  const std::pair<std::string_view, Adder> adders[] = {
      {"run", cordon::cli::AddRunCommand},         {"probe", cordon::cli::AddProbeCommand},
      {"grants", cordon::cli::AddGrantsCommand},   {"reap", cordon::cli::AddReapCommand},
      {"closure", cordon::cli::AddClosureCommand}, {"attest", cordon::cli::AddAttestCommand},
      {"signal", cordon::cli::AddSignalCommand},   {"serve", cordon::cli::AddServeCommand},
      {"mcp", cordon::cli::AddMcpCommand},
  };
  std::string_view named = argc > 1 ? argv[1] : "";
  bool known = false;
  for (const auto& [name, add] : adders) known |= name == named;
  std::vector<cordon::cli::Command> commands;
  for (const auto& [name, add] : adders) {
    if (!known || name == named) commands.push_back(add(app));
  }
  // Set after the subcommands are made, which would each inherit it.
  app.footer(
      "`cordon COMMAND --help` shows a command's options; `cordon run --help` its exit "
      "statuses.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where;
    for (CLI::App* sub : app.get_subcommands()) where = sub->get_name();
    std::string message = e.what();
    if (where.empty() && argc > 1 && argv[1][0] != '-') {
      message = "unknown command '" + std::string(argv[1]) + "'";
    } else if (where == "run" && dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // Only `run` takes a command: elsewhere an extra argument is an
      // unknown or misspelt option, and this hint would mislead.
      message += "; put the command after --, as in: cordon run [OPTIONS] -- PROG ARGS...";
    }
    cordon::cli::PrintError(
        where, message + " (see cordon " + (where.empty() ? "" : where + " ") + "--help)");
    return cordon::cli::kExitCordonFailed;
  }
  for (const auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return cordon::cli::kExitCordonFailed;
}
