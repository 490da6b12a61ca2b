// cordon reap: tear down what a crashed supervisor left behind.
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "contain/reap.h"

namespace cordon::cli {
namespace {

struct ReapArgs {
  bool json = false;
  std::string state_dir;
  std::string grant;
  CLI::Option* state_dir_option = nullptr;
};

int Execute(const ReapArgs& a) {
  auto store = OpenRecords("reap", Given(a.state_dir, a.state_dir_option->count() > 0));
  if (!store) return kExitCordonFailed;
  if (!a.grant.empty()) {
    // A grant that is not there is an error, not "nothing to reap": a
    // mistyped id would otherwise look reaped.
    sys::Result<std::optional<store::GrantRecord>> grant = std::optional<store::GrantRecord>();
    if (*store) grant = (*store)->GetGrant(a.grant);
    if (!grant) {
      PrintError("reap", grant.error().message());
      return kExitCordonFailed;
    }
    if (!*grant) {
      PrintError("reap", "--grant: no grant " + a.grant + " in this state directory");
      return kExitCordonFailed;
    }
  }
  sys::Result<std::vector<contain::ReapReport>> reports = std::vector<contain::ReapReport>();
  if (*store) {
    contain::KernelSignaller signaller;
    contain::ReapOptions options;
    options.grant_id = a.grant;
    reports = contain::Reap(**store, signaller, options);
  }
  if (!reports) {
    PrintError("reap", reports.error().message());
    return kExitCordonFailed;
  }
  bool survivors = false;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : *reports) {
    survivors |= r.action == "survivors";
    out.push_back({{"grant", r.grant_id},
                   {"action", r.action},
                   {"release", contain::ToJson(r.release)},
                   {"note", r.note}});
    if (!a.json) {
      std::string line = r.grant_id + ": " + r.action + " (" + r.note + ")";
      if (!r.release.survivors.empty()) {
        line += "; survivors:";
        for (pid_t p : r.release.survivors) line += " " + std::to_string(p);
      }
      std::printf("%s\n", line.c_str());
    }
  }
  if (a.json) {
    PrintJson(out);
  } else if (reports->empty()) {
    std::printf("nothing to reap\n");
  }
  return survivors ? 1 : 0;
}

}  // namespace

Command AddReapCommand(CLI::App& app) {
  auto args = std::make_shared<ReapArgs>();
  CLI::App* cmd = app.add_subcommand(
      "reap",
      "Tear down the process trees of active grants whose supervisor is gone (crashed, "
      "SIGKILLed), verify their death, and release them. A process whose identity no longer "
      "matches is never signalled. Exit 0 when every orphan is verified dead (or there was "
      "none), 1 when survivors remain, 125 when --grant names no grant.");
  cmd->add_flag("--json", args->json, "Print a JSON array of reports");
  cmd->add_option("--grant", args->grant, "Reap only this grant")->type_name("ID");
  args->state_dir_option =
      cmd->add_option("--state-dir", args->state_dir, "As for cordon run")->type_name("DIR");
  return Command{cmd, [args] { return Execute(*args); }};
}

}  // namespace cordon::cli
