// cordon grants: the grants in the store.
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/units.h"

namespace cordon::cli {
namespace {

struct GrantsArgs {
  bool all = false;
  bool json = false;
  std::string prune;  // a duration: forget released grants older than this
  std::string state_dir;
  CLI::Option* state_dir_option = nullptr;
  CLI::Option* prune_option = nullptr;
};

// A store no daemon prunes (cordon run alone) gains a released grant per
// run, kept until this is run: the same retention as `cordon serve
// --keep-records`, in batches. Active grants stay, whatever their age:
// `reap` needs them.
// No store (no state directory): nothing to forget.
int Prune(store::Store* store, int64_t keep_ms, const GrantsArgs& a) {
  constexpr int64_t kBatch = 1000;
  const int64_t before = store::NowMs() - keep_ms;
  int64_t pruned = 0;
  while (store) {
    auto n = store->PruneGrants(before, kBatch);
    if (!n) {
      PrintError("grants", n.error().message());
      return kExitCordonFailed;
    }
    pruned += *n;
    if (*n < kBatch) break;
  }
  if (a.json) {
    PrintJson({{"pruned", pruned}});
  } else {
    std::printf("forgot %lld released grant%s that ended more than %s ago\n",
                static_cast<long long>(pruned), pruned == 1 ? "" : "s", a.prune.c_str());
  }
  return 0;
}

// Text a run's caller chose, as one line of the table: a control character
// (a newline that would forge a row, an escape sequence the terminal would
// obey) is written as an escape, and so is the backslash.
std::string Printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string CommandText(const nlohmann::json& spec) {
  if (spec.contains("shell") && spec["shell"].is_string()) return spec["shell"].get<std::string>();
  std::string out;
  if (spec.contains("argv") && spec["argv"].is_array()) {
    for (const auto& a : spec["argv"]) {
      if (a.is_string()) out += (out.empty() ? "" : " ") + a.get<std::string>();
    }
  }
  return out;
}

int Execute(const GrantsArgs& a) {
  std::optional<int64_t> keep;
  if (a.prune_option->count() > 0) {
    // Checked before the store is opened: a bad value changes nothing.
    auto ms = ParseDurationMs(a.prune);
    if (!ms || *ms <= 0) {
      PrintError("grants", "--prune: " + (ms ? std::string("must be positive") : ms.error()));
      return kExitCordonFailed;
    }
    keep = *ms;
  }
  auto store = OpenRecords("grants", Given(a.state_dir, a.state_dir_option->count() > 0));
  if (!store) return kExitCordonFailed;
  store::Store* records = *store ? &**store : nullptr;
  if (keep) return Prune(records, *keep, a);
  sys::Result<std::vector<store::GrantRecord>> grants;
  if (records) grants = records->ListGrants(a.all);
  if (!grants) {
    PrintError("grants", grants.error().message());
    return kExitCordonFailed;
  }
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& g : *grants) out.push_back(store::ToJson(g));
    PrintJson(out);
    return 0;
  }
  std::printf("%-36s %-8s %-12s %-8s %-12s %s\n", "ID", "STATE", "OWNER", "PID", "OUTCOME",
              "COMMAND");
  for (const auto& g : *grants) {
    std::string pid = g.identity ? std::to_string(g.identity->pid) : "-";
    std::printf("%-36s %-8s %-12s %-8s %-12s %s\n", g.id.c_str(), g.state.c_str(),
                Printable(g.owner).c_str(), pid.c_str(),
                g.outcome.empty() ? "-" : g.outcome.c_str(),
                Printable(CommandText(g.spec)).c_str());
  }
  return 0;
}

}  // namespace

Command AddGrantsCommand(CLI::App& app) {
  auto args = std::make_shared<GrantsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "grants",
      "List grants: the active ones (still holding processes, or whose teardown could "
      "not be verified), or all with --all.");
  auto* all = cmd->add_flag("--all", args->all, "Include released grants");
  args->prune_option =
      cmd->add_option("--prune", args->prune,
                      "Instead of listing: forget the released grants that ended more than "
                      "DURATION ago (7d, 12h, 30m), as cordon serve --keep-records does; "
                      "active grants are kept")
          ->type_name("DURATION")
          ->excludes(all);
  cmd->add_flag("--json", args->json,
                "Print a JSON array of grant records, each with its identity "
                "{pid, ppid, start_ticks, boot_id}");
  args->state_dir_option =
      cmd->add_option("--state-dir", args->state_dir, "As for cordon run")->type_name("DIR");
  return Command{cmd, [args] { return Execute(*args); }};
}

}  // namespace cordon::cli
