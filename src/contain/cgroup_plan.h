// Where this supervisor puts its groups, per hierarchy, and why. cordon's
// groups go beneath the group the supervisor runs in, so the host's own
// limits keep applying (DESIGN.md §5); an operator may name another root.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "contain/cgroup_dir.h"
#include "contain/cgroup_layout.h"

namespace cordon::contain {

struct CgroupPlan {
  // cgroup v2: every process of a grant starts in a child of this directory
  // (CLONE_INTO_CGROUP). Empty when v2 cannot be used; `v2_problem` says why.
  std::string v2_parent;
  std::string v2_problem;
  // How a tree in such a group is killed: cgroup.kill (Linux 5.14+), else
  // frozen with cgroup.freeze (5.2+) and killed member by member. The
  // limits do not depend on it.
  GroupKill v2_kill = GroupKill::kCgroupKill;
  // Limit controllers ("cpu", "memory", "pids") that v2 groups under
  // v2_parent get.
  std::set<std::string> v2_controllers;

  // cgroup v1 parents for the limits v2 cannot provide (hybrid and v1 hosts).
  std::string v1_memory_parent;
  std::string v1_memory_problem;
  std::string v1_pids_parent;
  std::string v1_pids_problem;
  std::string v1_cpu_parent;  // the hierarchy holding "cpu" (often comounted as cpu,cpuacct)
  std::string v1_cpu_problem;

  // How the places were chosen, for `cordon probe`.
  std::vector<std::string> notes;
};

struct PlanOptions {
  // A cgroup path (as in /proc/self/cgroup, e.g. "/cordon-ci") used in every
  // hierarchy instead of "<own group>/cordon".
  std::optional<std::string> cgroup_root;
};

// What planning observes of and does to the cgroup filesystem. The host's
// is the only one in the binary; tests give a model of another kind of host
// (a pure cgroup v2 one) to check the decisions made there.
class CgroupHost {
 public:
  virtual ~CgroupHost() = default;
  virtual sys::Result<std::string> Read(const std::string& path) const = 0;
  virtual sys::Result<void> Write(const std::string& path, std::string_view value) const = 0;
  virtual sys::Result<void> MakeDirs(const std::string& path) const = 0;
  virtual bool Exists(const std::string& path) const = 0;
  virtual bool Writable(const std::string& path) const = 0;
  virtual bool Root() const = 0;  // the caller is root
};

// This host, as this process sees it.
const CgroupHost& ThisHost();

// Prepares the parent groups (mkdir -p, enable controllers where the rules
// allow) and records what can be used. Idempotent; never moves a process.
CgroupPlan PlanCgroups(const CgroupLayout& layout, const PlanOptions& options,
                       const CgroupHost& host = ThisHost());

// Checks a --cgroup-root value: absolute, no "..", no empty or dot segments.
std::optional<std::string> CgroupRootProblem(const std::string& root);

}  // namespace cordon::contain
