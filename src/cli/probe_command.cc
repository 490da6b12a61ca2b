// cordon probe: what this host can enforce for this caller, and why not.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "contain/probe.h"

namespace cordon::cli {
namespace {

struct ProbeArgs {
  bool json = false;
  std::string cgroup_root;
  CLI::Option* cgroup_root_option = nullptr;
};

int Execute(const ProbeArgs& a) {
  contain::ProbeOptions options;
  if (a.cgroup_root_option->count() > 0) {
    if (auto problem = contain::CgroupRootProblem(a.cgroup_root)) {
      PrintError("probe", "--cgroup-root: '" + a.cgroup_root + "' " + *problem);
      return kExitCordonFailed;
    }
    options.cgroups.cgroup_root = a.cgroup_root;
  }
  auto probe = contain::ProbeHost(options);
  if (!probe) {
    PrintError("probe", probe.error().message());
    return kExitCordonFailed;
  }
  if (a.json) {
    PrintJson(contain::ToJson(*probe));
    return 0;
  }
  std::printf("%-14s %-9s %-27s %s\n", "CAPABILITY", "STATUS", "MECHANISM", "DETAIL");
  for (const auto& s : probe->capabilities) {
    std::string detail = s.enforceable ? "" : s.reason + (s.fix.empty() ? "" : "; fix: " + s.fix);
    std::printf("%-14s %-9s %-27s %s\n", std::string(contain::CapabilityName(s.capability)).c_str(),
                s.enforceable ? "enforced" : "degraded",
                s.mechanism.empty() ? "-" : s.mechanism.c_str(), detail.c_str());
  }
  // How a run's tree is killed at its end (DESIGN.md §4.5).
  auto teardown = [&](bool isolated) {
    const std::string& t = probe->StatusFor(contain::Capability::kProcessTree, isolated).teardown;
    return t.empty() ? std::string("-") : t;
  };
  std::printf("\nteardown: %s (without isolation: %s)\n", teardown(true).c_str(),
              teardown(false).c_str());
  const contain::IsolationSupport& iso = probe->isolation;
  std::printf("\nisolation:\n  namespaces: %s\n  landlock: %s\n  seccomp: %s\n  ids: %s\n",
              iso.namespaces.available ? "yes" : ("no: " + iso.namespaces.problem).c_str(),
              iso.landlock_abi > 0 ? ("ABI " + std::to_string(iso.landlock_abi)).c_str() : "no",
              iso.seccomp ? "yes" : "no",
              iso.map_ids ? "each sandbox gets its own outside uid (uid_range)"
                          : "sandboxes are mapped to the caller's own uid");
  std::printf("\ncgroups:\n");
  for (const auto& n : probe->cgroups.notes) std::printf("  %s\n", n.c_str());
  for (const auto* p : {&probe->cgroups.v2_problem, &probe->cgroups.v1_memory_problem,
                        &probe->cgroups.v1_pids_problem, &probe->cgroups.v1_cpu_problem}) {
    if (!p->empty()) std::printf("  not used: %s\n", p->c_str());
  }
  return 0;
}

}  // namespace

Command AddProbeCommand(CLI::App& app) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Show, per capability, whether this host can enforce it for you, by which mechanism, and "
      "when it cannot, why and what would fix it. Prepares cordon's parent cgroups.");
  cmd->add_flag("--json", args->json, "Print JSON");
  args->cgroup_root_option =
      cmd->add_option("--cgroup-root", args->cgroup_root, "As for cordon run")->type_name("PATH");
  return Command{cmd, [args] { return Execute(*args); }};
}

}  // namespace cordon::cli
