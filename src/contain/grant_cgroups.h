// The cgroups of one grant: a v2 group that holds the whole tree (and, on a
// pure v2 host, its limits), and v1 memory/pids/cpu groups where the limits
// have to come from cgroup v1 (hybrid hosts).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "contain/cgroup_dir.h"
#include "contain/cgroup_plan.h"

namespace cordon::contain {

struct CgroupLimits {
  bool tree = false;  // a v2 group for membership and cgroup.kill
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> pids;
  std::optional<double> cpu;  // CPUs: a CFS quota per 100 ms period
};

// The CFS period cordon uses (the kernel's default), and the quota for
// `cpus` CPUs in it: round(cpus * period), at least the kernel's 1 ms.
inline constexpr int64_t kCpuPeriodUs = 100000;
int64_t CpuQuotaUs(double cpus);

// Where each of a grant's groups is, as recorded in the store.
struct CgroupPaths {
  std::string v2;
  std::string memory;  // v1
  std::string pids;    // v1
  std::string cpu;     // v1
  bool empty() const { return v2.empty() && memory.empty() && pids.empty() && cpu.empty(); }
};
// The record's `cgroups` object ({"v2", "memory", "pids", "cpu"}, each only
// where there is a group) and back; a key that is missing or not a string
// is no group.
nlohmann::json ToJson(const CgroupPaths& paths);
CgroupPaths CgroupPathsFrom(const nlohmann::json& recorded);

struct CpuUsage {
  uint64_t user_us = 0;
  uint64_t system_us = 0;
};

class GrantCgroups final {
 public:
  // Where Create would make the groups named `name` for `limits` (what a
  // grant records before they exist); an error where the plan has no
  // parent for one.
  static sys::Result<CgroupPaths> Paths(const CgroupPlan& plan, const std::string& name,
                                        const CgroupLimits& limits);
  // Creates the groups named `name` under the plan's parents (at Paths) and
  // applies the limits. On failure, whatever was created is removed again.
  static sys::Result<GrantCgroups> Create(const CgroupPlan& plan, const std::string& name,
                                          const CgroupLimits& limits);
  // Reopens the groups of a grant found in the store (reap); those that no
  // longer exist are skipped.
  static GrantCgroups Reopen(const CgroupPaths& paths);

  GrantCgroups(GrantCgroups&&) noexcept = default;
  GrantCgroups& operator=(GrantCgroups&&) noexcept = default;

  CgroupPaths paths() const;
  const CgroupDir* v2() const { return v2_ ? &*v2_ : nullptr; }
  // A v1 group that holds the whole tree (memory, pids or cpu), if any.
  const CgroupDir* v1() const {
    return memory_ ? &*memory_ : pids_ ? &*pids_ : cpu_ ? &*cpu_ : nullptr;
  }

  // For clone3(CLONE_INTO_CGROUP): the v2 group's directory fd, or -1.
  int clone_into_fd() const { return v2_ ? v2_->fd() : -1; }
  // cgroup.procs of each v1 group, opened for writing: the child writes "0"
  // into each before anything else, so it and all it forks are accounted.
  const std::vector<sys::UniqueFd>& join_fds() const { return join_fds_; }

  // OOM kills recorded by the memory controller (memory.events or
  // memory.oom_control); empty when no group limits memory.
  sys::Result<std::optional<uint64_t>> OomKills() const;
  // CPU time of everything that ran in the v2 group (cpu.stat), if any.
  std::optional<CpuUsage> Cpu() const;

  // Removes every group. Call only after death was verified.
  sys::Result<void> Remove();

 private:
  GrantCgroups() = default;
  sys::Result<void> OpenJoinFds();

  std::optional<CgroupDir> v2_;
  std::optional<CgroupDir> memory_;
  std::optional<CgroupDir> pids_;
  std::optional<CgroupDir> cpu_;
  bool memory_in_v2_ = false;
  std::vector<sys::UniqueFd> join_fds_;
};

}  // namespace cordon::contain
