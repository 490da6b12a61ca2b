#include "contain/reap.h"

#include <cerrno>
#include <chrono>
#include <optional>

#include "contain/grant_cgroups.h"
#include "contain/tree.h"
#include "proc/identity.h"

namespace cordon::contain {
namespace {

using nlohmann::json;

// Whether the grant's main process was the init of a pid namespace.
bool HadPidNamespace(const store::GrantRecord& g) {
  for (const auto& [capability, mechanism] : g.mechanisms.items()) {
    if (mechanism.is_string() && mechanism.get<std::string>() == "pid_namespace") return true;
  }
  return false;
}

ReapReport ReapOne(const store::GrantRecord& g, Signaller& signaller,
                   std::chrono::milliseconds verify_timeout) {
  ReapReport report{g.id, "", {}, ""};
  auto boot_id = proc::BootId();
  if (boot_id && g.supervisor.boot_id != *boot_id) {
    report.action = "gone";
    report.release.dead = true;
    report.release.method = "reboot";
    report.note = "the grant is from another boot: its processes and cgroups are gone";
    return report;
  }

  GrantCgroups cgroups = GrantCgroups::Reopen(CgroupPathsFrom(g.cgroups));
  bool has_group = cgroups.v2() || cgroups.v1();
  std::unique_ptr<Tree> tree;
  // The sandbox's init, pinned while its identity still matches (checked
  // after pinning, so the pidfd cannot name a recycled pid): its exit is
  // what says the namespace is gone, which an empty group alone does not.
  std::optional<sys::PidFd> ns_init;
  if (has_group && g.identity && HadPidNamespace(g)) {
    auto pinned = sys::PidFd::Open(g.identity->pid);
    if (pinned && proc::Verify(*g.identity) == proc::Mismatch::kNone) ns_init = std::move(*pinned);
  }
  if (has_group) {
    // The group is named after the grant: everything in it is the grant's.
    tree = TreeFor(&cgroups, 0, 0, 0, ns_init ? &*ns_init : nullptr);
    report.note = "torn down through its cgroup";
  } else if (g.identity && g.pgid) {
    proc::Mismatch m = proc::Verify(*g.identity);
    if (m == proc::Mismatch::kPidReused || m == proc::Mismatch::kWrongBoot) {
      // The group's number was free for reuse, so the group is empty; the
      // process now holding the pid is someone else's and is not touched.
      report.action = "gone";
      report.release.dead = true;
      report.release.method = "identity";
      report.note = "identity mismatch (" + std::string(proc::MismatchName(m)) + "): pid " +
                    std::to_string(g.identity->pid) +
                    " belongs to another process now; nothing was signalled";
      return report;
    }
    tree = TreeFor(nullptr, *g.pgid, g.identity->pid, g.identity->start_ticks);
    report.note = m == proc::Mismatch::kNone ? "torn down through its process group"
                                             : "leader gone; its process group torn down";
  } else {
    report.action = "gone";
    report.release.dead = true;
    report.release.method = "none";
    report.note = "the grant never started a process and has no cgroup left";
    return report;
  }

  auto release = KillNow(*tree, signaller, verify_timeout);
  if (!release) {
    report.action = "survivors";
    report.release.method = std::string(tree->method());
    report.release.problem = release.error().message();
    report.note = "teardown failed: " + release.error().message();
    return report;
  }
  report.release = *release;
  if (!release->dead) {
    report.action = "survivors";
    return report;
  }
  report.action = "reaped";
  // Dead means the end was observed (Tree::Ended: the group unpopulated,
  // the init exited), so the group can be removed now.
  auto removed = cgroups.Remove();
  if (!removed) report.note += "; cannot remove its cgroup: " + removed.error().message();
  return report;
}

}  // namespace

sys::Result<std::vector<ReapReport>> Reap(store::Store& store, Signaller& signaller,
                                          const ReapOptions& options) {
  CORDON_ASSIGN_OR_RETURN(std::vector<store::GrantRecord> active, store.ListGrants(false));
  std::vector<ReapReport> reports;
  for (const auto& g : active) {
    if (!options.grant_id.empty() && g.id != options.grant_id) continue;
    // A live supervisor finishes its own grant.
    if (proc::Verify(g.supervisor) == proc::Mismatch::kNone) continue;
    ReapReport report = ReapOne(g, signaller, options.verify_timeout);
    bool released = report.action != "survivors";
    std::string outcome = g.outcome.empty() ? "cancelled" : g.outcome;
    json release = ToJson(report.release);
    release["reaped"] = true;
    release["note"] = report.note;
    if (auto recorded = store.RecordRelease(g.id, outcome, release, released); !recorded) {
      return std::unexpected(recorded.error().Context("record the release of " + g.id));
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace cordon::contain
