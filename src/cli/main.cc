// cordon: the CLI. A thin main over the library.
#include <signal.h>

#include <CLI/CLI.hpp>

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
  app.footer(
      "Exit status of `cordon run`: the command's own; 128+N when killed by signal N; 124 "
      "on timeout; 125 when cordon refused or failed; 126/127 when the program could not "
      "be executed / was not found.");

  const cordon::cli::Command commands[] = {
      cordon::cli::AddRunCommand(app),     cordon::cli::AddProbeCommand(app),
      cordon::cli::AddGrantsCommand(app),  cordon::cli::AddReapCommand(app),
      cordon::cli::AddClosureCommand(app),
  };

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
    } else if (!where.empty() && dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
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
