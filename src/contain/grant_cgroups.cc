#include "contain/grant_cgroups.h"

#include <fcntl.h>

#include <algorithm>
#include <cmath>

namespace cordon::contain {
namespace {

// "Guard" removes partially created groups unless released.
struct RemoveOnFailure {
  std::vector<CgroupDir*> dirs;
  bool armed = true;
  ~RemoveOnFailure() {
    if (!armed) return;
    for (CgroupDir* d : dirs) (void)d->Remove();
  }
};

}  // namespace

int64_t CpuQuotaUs(double cpus) {
  // The kernel refuses a quota under 1 ms (EINVAL).
  return std::max<int64_t>(1000, std::llround(cpus * static_cast<double>(kCpuPeriodUs)));
}

nlohmann::json ToJson(const CgroupPaths& paths) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, path] : {std::pair{"v2", &paths.v2}, std::pair{"memory", &paths.memory},
                                  std::pair{"pids", &paths.pids}, std::pair{"cpu", &paths.cpu}}) {
    if (!path->empty()) out[key] = *path;
  }
  return out;
}

CgroupPaths CgroupPathsFrom(const nlohmann::json& recorded) {
  auto get = [&](const char* key) {
    return recorded.is_object() && recorded.contains(key) && recorded[key].is_string()
               ? recorded[key].get<std::string>()
               : std::string();
  };
  return CgroupPaths{get("v2"), get("memory"), get("pids"), get("cpu")};
}

namespace {

// Which hierarchy holds each limit: v2 where the plan's v2 parent has the
// controller, else the v1 hierarchy of its own.
struct Placement {
  bool memory_v2;
  bool pids_v2;
  bool cpu_v2;
};

Placement PlaceLimits(const CgroupPlan& plan, const CgroupLimits& limits) {
  return Placement{limits.memory_bytes && plan.v2_controllers.contains("memory"),
                   limits.pids && plan.v2_controllers.contains("pids"),
                   limits.cpu && plan.v2_controllers.contains("cpu")};
}

}  // namespace

sys::Result<CgroupPaths> GrantCgroups::Paths(const CgroupPlan& plan, const std::string& name,
                                             const CgroupLimits& limits) {
  const Placement at = PlaceLimits(plan, limits);
  auto under = [&name](const std::string& parent, const char* what,
                       const std::string& problem) -> sys::Result<std::string> {
    if (parent.empty()) return sys::Fail(std::string(what) + problem, ENOENT);
    return parent + "/" + name;
  };
  CgroupPaths paths;
  if (limits.tree || at.memory_v2 || at.pids_v2 || at.cpu_v2) {
    CORDON_ASSIGN_OR_RETURN(paths.v2,
                            under(plan.v2_parent, "no cgroup v2 parent: ", plan.v2_problem));
  }
  if (limits.memory_bytes && !at.memory_v2) {
    CORDON_ASSIGN_OR_RETURN(
        paths.memory, under(plan.v1_memory_parent, "no memory cgroup: ", plan.v1_memory_problem));
  }
  if (limits.pids && !at.pids_v2) {
    CORDON_ASSIGN_OR_RETURN(paths.pids,
                            under(plan.v1_pids_parent, "no pids cgroup: ", plan.v1_pids_problem));
  }
  if (limits.cpu && !at.cpu_v2) {
    CORDON_ASSIGN_OR_RETURN(paths.cpu,
                            under(plan.v1_cpu_parent, "no cpu cgroup: ", plan.v1_cpu_problem));
  }
  return paths;
}

sys::Result<GrantCgroups> GrantCgroups::Create(const CgroupPlan& plan, const std::string& name,
                                               const CgroupLimits& limits) {
  CORDON_ASSIGN_OR_RETURN(CgroupPaths paths, Paths(plan, name, limits));
  const Placement at = PlaceLimits(plan, limits);
  GrantCgroups g;
  RemoveOnFailure guard;
  auto make = [&guard](const std::string& path,
                       std::optional<CgroupDir>& slot) -> sys::Result<void> {
    if (path.empty()) return {};
    CORDON_ASSIGN_OR_RETURN(CgroupDir dir, CgroupDir::Create(path));
    slot = std::move(dir);
    guard.dirs.push_back(&*slot);
    return {};
  };
  CORDON_RETURN_IF_ERROR(make(paths.v2, g.v2_));
  CORDON_RETURN_IF_ERROR(make(paths.memory, g.memory_));
  CORDON_RETURN_IF_ERROR(make(paths.pids, g.pids_));
  CORDON_RETURN_IF_ERROR(make(paths.cpu, g.cpu_));

  if (at.memory_v2) {
    g.memory_in_v2_ = true;
    CORDON_RETURN_IF_ERROR(g.v2_->Write("memory.max", std::to_string(*limits.memory_bytes)));
    // Without this the limit could be met by swapping instead of an OOM kill.
    if (g.v2_->Has("memory.swap.max")) CORDON_RETURN_IF_ERROR(g.v2_->Write("memory.swap.max", "0"));
  } else if (limits.memory_bytes) {
    std::string bytes = std::to_string(*limits.memory_bytes);
    CORDON_RETURN_IF_ERROR(g.memory_->Write("memory.limit_in_bytes", bytes));
    // memsw bounds memory+swap; it must be set after limit_in_bytes.
    if (g.memory_->Has("memory.memsw.limit_in_bytes")) {
      CORDON_RETURN_IF_ERROR(g.memory_->Write("memory.memsw.limit_in_bytes", bytes));
    }
  }
  if (limits.pids) {
    const CgroupDir& dir = at.pids_v2 ? *g.v2_ : *g.pids_;
    CORDON_RETURN_IF_ERROR(dir.Write("pids.max", std::to_string(*limits.pids)));
  }
  if (limits.cpu) {
    std::string quota = std::to_string(CpuQuotaUs(*limits.cpu));
    std::string period = std::to_string(kCpuPeriodUs);
    if (at.cpu_v2) {
      CORDON_RETURN_IF_ERROR(g.v2_->Write("cpu.max", quota + " " + period));
    } else {
      // The period first: the quota is checked against it (and, on v1,
      // against the parent's quota).
      CORDON_RETURN_IF_ERROR(g.cpu_->Write("cpu.cfs_period_us", period));
      CORDON_RETURN_IF_ERROR(g.cpu_->Write("cpu.cfs_quota_us", quota));
    }
  }
  CORDON_RETURN_IF_ERROR(g.OpenJoinFds());
  guard.armed = false;
  return g;
}

sys::Result<void> GrantCgroups::OpenJoinFds() {
  for (const auto* dir : {&memory_, &pids_, &cpu_}) {
    if (!*dir) continue;
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenAt((*dir)->fd(), "cgroup.procs", O_WRONLY));
    join_fds_.push_back(std::move(fd));
  }
  return {};
}

GrantCgroups GrantCgroups::Reopen(const CgroupPaths& paths) {
  GrantCgroups g;
  auto open = [](const std::string& path) -> std::optional<CgroupDir> {
    if (path.empty()) return std::nullopt;
    auto dir = CgroupDir::Open(path);
    if (!dir) return std::nullopt;
    return std::move(*dir);
  };
  g.v2_ = open(paths.v2);
  g.memory_ = open(paths.memory);
  g.pids_ = open(paths.pids);
  g.cpu_ = open(paths.cpu);
  g.memory_in_v2_ = g.v2_ && g.v2_->Has("memory.events");
  return g;
}

CgroupPaths GrantCgroups::paths() const {
  return CgroupPaths{v2_ ? v2_->path() : "", memory_ ? memory_->path() : "",
                     pids_ ? pids_->path() : "", cpu_ ? cpu_->path() : ""};
}

sys::Result<std::optional<uint64_t>> GrantCgroups::OomKills() const {
  if (memory_in_v2_ && v2_) return v2_->ReadKey("memory.events", "oom_kill");
  if (memory_) return memory_->ReadKey("memory.oom_control", "oom_kill");
  return std::nullopt;
}

std::optional<CpuUsage> GrantCgroups::Cpu() const {
  if (!v2_) return std::nullopt;
  auto usec = v2_->ReadKeys("cpu.stat", {"user_usec", "system_usec"});
  if (!usec || !(*usec)[0] || !(*usec)[1]) return std::nullopt;
  return CpuUsage{*(*usec)[0], *(*usec)[1]};
}

sys::Result<void> GrantCgroups::Remove() {
  join_fds_.clear();
  std::optional<sys::Error> first;
  for (auto* dir : {&v2_, &memory_, &pids_, &cpu_}) {
    if (!*dir) continue;
    if (auto removed = (*dir)->Remove(); !removed && !first) first = removed.error();
  }
  if (first) return std::unexpected(*first);
  v2_.reset();
  memory_.reset();
  pids_.reset();
  cpu_.reset();
  return {};
}

}  // namespace cordon::contain
