#include "contain/cgroup_plan.h"

#include <unistd.h>

#include "contain/cgroup_dir.h"

namespace cordon::contain {
namespace {

const std::set<std::string> kLimitControllers = {"cpu", "memory", "pids"};
// The controllers worth moving cordon's groups to the top of a pure v2 tree
// for. cpu is not: it is often not delegated where memory and pids are, and
// leaving the supervisor's own group (whose limits then no longer apply) for
// a CPU quota alone would trade a host bound for a tenant one.
const std::set<std::string> kTopControllers = {"memory", "pids"};

std::set<std::string> Words(const std::string& text) {
  std::set<std::string> words;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find_first_of(" \n", pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) words.insert(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return words;
}

class RealHost final : public CgroupHost {
 public:
  sys::Result<std::string> Read(const std::string& path) const override {
    return sys::ReadFile(path);
  }
  sys::Result<void> Write(const std::string& path, std::string_view value) const override {
    return sys::WriteFile(path, value);
  }
  sys::Result<void> MakeDirs(const std::string& path) const override {
    return contain::MakeDirs(path);
  }
  bool Exists(const std::string& path) const override { return ::access(path.c_str(), F_OK) == 0; }
  bool Writable(const std::string& path) const override {
    return ::access(path.c_str(), W_OK) == 0;
  }
  bool Root() const override { return ::geteuid() == 0; }
};

// The planning steps, against one host.
class Planner {
 public:
  explicit Planner(const CgroupHost& host) : host_(host) {}
  void PlanV2(const Hierarchy& h, const PlanOptions& options, CgroupPlan& plan) const;
  void PlanV1(const CgroupLayout& layout, const std::string& controller, const PlanOptions& options,
              std::string& parent_out, std::string& problem_out, CgroupPlan& plan) const;

 private:
  std::set<std::string> ReadWords(const std::string& path) const {
    auto text = host_.Read(path);
    return text ? Words(*text) : std::set<std::string>{};
  }
  void Enable(const std::string& dir, const std::set<std::string>& controllers) const;
  std::set<std::string> PrepareControllers(const std::string& mount,
                                           const std::string& parent) const;

  const CgroupHost& host_;
};

std::string Parent(const std::string& path) { return path.substr(0, path.rfind('/')); }

std::string Join(const std::set<std::string>& items, std::string_view prefix) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : " ") + std::string(prefix) + i;
  return out;
}

// Asks `dir` to hand `controllers` to its children, one write each: the
// kernel applies a write of several all or nothing, and one that cannot be
// enabled (cpu, while a realtime process sits in a child group) must not
// cost the others. Fails quietly: the caller re-reads what its children
// actually got.
void Planner::Enable(const std::string& dir, const std::set<std::string>& controllers) const {
  for (const auto& c : controllers) (void)host_.Write(dir + "/cgroup.subtree_control", "+" + c);
}

std::set<std::string> Missing(const std::set<std::string>& have,
                              const std::set<std::string>& of = kLimitControllers) {
  std::set<std::string> missing;
  for (const auto& c : of) {
    if (!have.contains(c)) missing.insert(c);
  }
  return missing;
}

// The limit controllers children of `parent` can use, enabling what the
// rules allow: a group may hand controllers to its children only if it holds
// no processes itself (the root group excepted).
std::set<std::string> Planner::PrepareControllers(const std::string& mount,
                                                  const std::string& parent) const {
  std::set<std::string> available = ReadWords(parent + "/cgroup.controllers");
  std::set<std::string> wanted;
  for (const auto& c : Missing(available)) {
    if (ReadWords(mount + "/cgroup.controllers").contains(c)) wanted.insert(c);
  }
  if (!wanted.empty()) {
    std::string up = Parent(parent);
    bool up_is_root = up == mount;
    auto procs = host_.Read(up + "/cgroup.procs");
    if (up_is_root || (procs && procs->empty())) {
      Enable(up, wanted);
      available = ReadWords(parent + "/cgroup.controllers");
    }
  }
  std::set<std::string> usable;
  for (const auto& c : kLimitControllers) {
    if (available.contains(c)) usable.insert(c);
  }
  Enable(parent, usable);
  std::set<std::string> enabled = ReadWords(parent + "/cgroup.subtree_control");
  std::set<std::string> result;
  for (const auto& c : usable) {
    if (enabled.contains(c)) result.insert(c);
  }
  return result;
}

void Planner::PlanV2(const Hierarchy& h, const PlanOptions& options, CgroupPlan& plan) const {
  std::string parent =
      options.cgroup_root ? h.mount_point + *options.cgroup_root : h.own_dir + "/cordon";
  if (auto made = host_.MakeDirs(parent); !made) {
    plan.v2_problem = "cannot create the cgroup " + parent + ": " + made.error().message() +
                      (!host_.Root() ? " (not root, and the group this process runs in, " +
                                           h.own_dir + ", is not delegated to it)"
                                     : "");
    return;
  }
  if (!host_.Writable(parent + "/cgroup.procs")) {
    plan.v2_problem = "cannot write " + parent + "/cgroup.procs";
    return;
  }
  plan.v2_parent = parent;
  // cgroup.kill is for teardown only: without it (Linux 5.10, say) the
  // groups still hold the tree and its limits, and teardown freezes them.
  // (Grant groups get the same control files as their parent.)
  if (host_.Exists(parent + "/cgroup.kill")) {
    plan.v2_kill = GroupKill::kCgroupKill;
  } else if (host_.Exists(parent + "/cgroup.freeze")) {
    plan.v2_kill = GroupKill::kFreezeKill;
    plan.notes.push_back("cgroup v2 at " + h.mount_point +
                         " has no cgroup.kill (Linux 5.14 or later): a tree is torn down by "
                         "freezing its group (cgroup.freeze) and killing each member, or through "
                         "its pid namespace");
  } else {
    plan.v2_kill = GroupKill::kEach;
    plan.notes.push_back("cgroup v2 at " + h.mount_point +
                         " has neither cgroup.kill (Linux 5.14) nor cgroup.freeze (5.2): a "
                         "tree's members are killed one by one, which a fork loop can outrun; "
                         "only a pid namespace holds the tree");
  }
  // A hybrid host's v2 tree has no controllers at all: nothing to prepare.
  std::set<std::string> in_tree = ReadWords(h.mount_point + "/cgroup.controllers");
  bool tree_has_limits = false;
  for (const auto& c : kLimitControllers) tree_has_limits |= in_tree.contains(c);
  if (!tree_has_limits) {
    plan.notes.push_back("cgroup v2 groups go under " + parent +
                         " (the v2 tree has no cpu, memory or pids controller: kill and "
                         "membership only)");
    return;
  }
  plan.v2_controllers = PrepareControllers(h.mount_point, parent);

  // A pure v2 host where our own group holds processes (a CLI run from a
  // shell) cannot hand controllers down from it. Root may use a group at the
  // top of the tree instead; the probe says so.
  std::set<std::string> missing = Missing(plan.v2_controllers, kTopControllers);
  bool tree_has_missing = false;
  for (const auto& c : missing) tree_has_missing |= in_tree.contains(c);
  std::string top = h.mount_point + "/cordon";
  if (tree_has_missing && !options.cgroup_root && parent != top && host_.Root()) {
    if (host_.MakeDirs(top)) {
      std::set<std::string> top_controllers = PrepareControllers(h.mount_point, top);
      if (Missing(top_controllers, kTopControllers).size() < missing.size()) {
        plan.notes.push_back("the supervisor's own group " + h.own_dir +
                             " holds processes, so it cannot hand controllers to child groups "
                             "(cgroup v2 'no internal processes' rule); using " +
                             top + " at the top of the tree instead");
        plan.v2_parent = top;
        plan.v2_controllers = top_controllers;
      }
    }
  }
  plan.notes.push_back("cgroup v2 groups go under " + plan.v2_parent +
                       (plan.v2_controllers.empty()
                            ? " (no limit controllers there: kill and membership only)"
                            : " with controllers: " + Join(plan.v2_controllers, "")));
}

void Planner::PlanV1(const CgroupLayout& layout, const std::string& controller,
                     const PlanOptions& options, std::string& parent_out, std::string& problem_out,
                     CgroupPlan& plan) const {
  auto it = layout.v1.find(controller);
  if (it == layout.v1.end()) {
    problem_out = "no cgroup v1 " + controller + " hierarchy is mounted";
    return;
  }
  const Hierarchy& h = it->second;
  std::string parent =
      options.cgroup_root ? h.mount_point + *options.cgroup_root : h.own_dir + "/cordon";
  if (auto made = host_.MakeDirs(parent); !made) {
    problem_out = "cannot create the cgroup " + parent + ": " + made.error().message();
    return;
  }
  if (!host_.Writable(parent + "/cgroup.procs")) {
    problem_out = "cannot write " + parent + "/cgroup.procs";
    return;
  }
  parent_out = parent;
  plan.notes.push_back("cgroup v1 " + controller + " groups go under " + parent);
}

}  // namespace

const CgroupHost& ThisHost() {
  static const RealHost host;
  return host;
}

CgroupPlan PlanCgroups(const CgroupLayout& layout, const PlanOptions& options,
                       const CgroupHost& host) {
  CgroupPlan plan;
  Planner planner(host);
  if (layout.v2) {
    planner.PlanV2(*layout.v2, options, plan);
  } else {
    plan.v2_problem = "no cgroup v2 hierarchy is mounted";
  }
  if (!plan.v2_controllers.contains("memory")) {
    planner.PlanV1(layout, "memory", options, plan.v1_memory_parent, plan.v1_memory_problem, plan);
  }
  if (!plan.v2_controllers.contains("pids")) {
    planner.PlanV1(layout, "pids", options, plan.v1_pids_parent, plan.v1_pids_problem, plan);
  }
  // On a hybrid host cpu is often comounted with cpuacct: the layout keys
  // each hierarchy by every controller it holds, so "cpu" finds it.
  if (!plan.v2_controllers.contains("cpu")) {
    planner.PlanV1(layout, "cpu", options, plan.v1_cpu_parent, plan.v1_cpu_problem, plan);
  }
  return plan;
}

std::optional<std::string> CgroupRootProblem(const std::string& root) {
  if (root.empty() || root[0] != '/') return "must be an absolute cgroup path such as /cordon";
  if (root == "/") return "must name a group below the root, such as /cordon";
  size_t pos = 1;
  while (pos <= root.size()) {
    size_t end = root.find('/', pos);
    if (end == std::string::npos) end = root.size();
    std::string segment = root.substr(pos, end - pos);
    if (segment.empty()) return "has an empty path segment (or a trailing '/')";
    if (segment == "." || segment == "..") return "must not contain '.' or '..'";
    pos = end + 1;
  }
  if (root.find('\0') != std::string::npos) return "contains a NUL byte";
  return std::nullopt;
}

}  // namespace cordon::contain
