// Planning on a pure cgroup v2 host, against a model of its rules (this
// project's machines are hybrid, so the real v2 controller paths cannot be
// exercised here): a group's cgroup.controllers is what its parent's
// cgroup.subtree_control enables; only the root, or a group with no
// processes, may enable controllers for its children.
#include "contain/cgroup_plan.h"

#include <gtest/gtest.h>

#include <map>

#include "contain/probe.h"

namespace cordon::contain {
namespace {

class V2Model final : public CgroupHost {
 public:
  struct Group {
    std::set<std::string> subtree;
    int procs = 0;
  };
  static constexpr const char* kMount = "/sys/fs/cgroup";

  V2Model(bool root, std::string delegated = "") : root_(root), delegated_(std::move(delegated)) {
    groups_[kMount] = {};
  }
  void AddGroup(const std::string& dir, int procs, std::set<std::string> subtree = {}) {
    groups_[dir] = Group{std::move(subtree), procs};
  }
  const Group& At(const std::string& dir) const { return groups_.at(dir); }
  // Enabling `controller` fails with EINVAL, as cpu does on a kernel with
  // RT group scheduling while a realtime process sits in a child group.
  void Refuse(const std::string& controller) { refused_.insert(controller); }
  // A kernel before Linux 5.14 (Debian 11's 5.10): no cgroup.kill.
  void WithoutKill() { kill_ = false; }
  // A kernel before Linux 5.2: no cgroup.freeze either.
  void WithoutFreeze() { freeze_ = false; }

  sys::Result<std::string> Read(const std::string& path) const override {
    auto [dir, file] = Split(path);
    auto it = groups_.find(dir);
    if (it == groups_.end()) return sys::Fail("no " + dir, ENOENT);
    if (file == "cgroup.controllers") return Join(Controllers(dir));
    if (file == "cgroup.subtree_control") return Join(it->second.subtree);
    if (file == "cgroup.procs") return it->second.procs > 0 ? std::string("4242\n") : "";
    return sys::Fail("no " + path, ENOENT);
  }
  sys::Result<void> Write(const std::string& path, std::string_view value) const override {
    auto [dir, file] = Split(path);
    auto it = groups_.find(dir);
    if (it == groups_.end() || file != "cgroup.subtree_control") return sys::Fail(path, ENOENT);
    if (!root_ && !Delegated(dir)) return sys::Fail(path, EACCES);
    if (dir != kMount && it->second.procs > 0) return sys::Fail(path, EBUSY);
    std::set<std::string> available = Controllers(dir);
    std::set<std::string> add;
    for (std::string word : Words(std::string(value))) {
      if (word.empty() || word[0] != '+' || !available.contains(word.substr(1))) {
        return sys::Fail(path, ENOENT);
      }
      if (refused_.contains(word.substr(1))) return sys::Fail(path, EINVAL);
      add.insert(word.substr(1));
    }
    it->second.subtree.insert(add.begin(), add.end());
    return {};
  }
  sys::Result<void> MakeDirs(const std::string& path) const override {
    std::string dir = kMount;
    std::string rest = path.substr(dir.size());
    size_t pos = 1;
    while (pos < rest.size()) {
      size_t end = std::min(rest.find('/', pos), rest.size());
      dir += "/" + rest.substr(pos, end - pos);
      pos = end + 1;
      if (groups_.contains(dir)) continue;
      if (!root_ && !Delegated(dir.substr(0, dir.rfind('/')))) return sys::Fail(dir, EACCES);
      groups_[dir] = {};
    }
    return {};
  }
  bool Exists(const std::string& path) const override {
    auto [dir, file] = Split(path);
    if (!groups_.contains(dir)) return false;
    // Only non-root groups have them.
    if (file == "cgroup.kill") return kill_ && dir != kMount;
    if (file == "cgroup.freeze") return freeze_ && dir != kMount;
    return true;
  }
  bool Writable(const std::string& path) const override {
    return root_ || Delegated(Split(path).first);
  }
  bool Root() const override { return root_; }

 private:
  static std::pair<std::string, std::string> Split(const std::string& path) {
    size_t slash = path.rfind('/');
    return {path.substr(0, slash), path.substr(slash + 1)};
  }
  static std::set<std::string> Words(const std::string& s) {
    std::set<std::string> out;
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t end = s.find_first_of(" \n", pos);
      if (end == std::string::npos) end = s.size();
      if (end > pos) out.insert(s.substr(pos, end - pos));
      pos = end + 1;
    }
    return out;
  }
  static std::string Join(const std::set<std::string>& items) {
    std::string out;
    for (const auto& i : items) out += (out.empty() ? "" : " ") + i;
    return out + "\n";
  }
  std::set<std::string> Controllers(const std::string& dir) const {
    if (dir == kMount) return {"cpu", "io", "memory", "pids"};
    return groups_.at(dir.substr(0, dir.rfind('/'))).subtree;
  }
  bool Delegated(const std::string& dir) const {
    return !delegated_.empty() && (dir == delegated_ || dir.starts_with(delegated_ + "/"));
  }

  bool root_;
  std::string delegated_;
  std::set<std::string> refused_;
  bool kill_ = true;
  bool freeze_ = true;
  mutable std::map<std::string, Group> groups_;
};

// A hybrid host (this project's machines): v1 controllers, cpu comounted
// with cpuacct, and a v2 tree without controllers. Everything is writable
// (root).
class HybridModel final : public CgroupHost {
 public:
  sys::Result<std::string> Read(const std::string& path) const override {
    if (path.ends_with("/cgroup.controllers") || path.ends_with("/cgroup.subtree_control") ||
        path.ends_with("/cgroup.procs")) {
      return std::string();
    }
    return sys::Fail("no " + path, ENOENT);
  }
  sys::Result<void> Write(const std::string& path, std::string_view) const override {
    return sys::Fail(path, ENOENT);
  }
  sys::Result<void> MakeDirs(const std::string& path) const override {
    made_.insert(path);
    return {};
  }
  bool Exists(const std::string&) const override { return true; }
  bool Writable(const std::string&) const override { return true; }
  bool Root() const override { return true; }
  const std::set<std::string>& made() const { return made_; }

 private:
  mutable std::set<std::string> made_;
};

TEST(HybridPlanTest, TheCpuQuotaComesFromACpuCpuacctHierarchy) {
  const char* mountinfo =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  const char* self = "8:pids:/\n4:memory:/job\n2:cpu,cpuacct:/\n0::/\n";
  HybridModel host;
  CgroupPlan plan = PlanCgroups(ParseCgroupLayout(mountinfo, self), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/unified/cordon");
  EXPECT_TRUE(plan.v2_controllers.empty());
  EXPECT_EQ(plan.v1_cpu_parent, "/sys/fs/cgroup/cpu,cpuacct/cordon");
  EXPECT_TRUE(plan.v1_cpu_problem.empty()) << plan.v1_cpu_problem;
  EXPECT_EQ(plan.v1_memory_parent, "/sys/fs/cgroup/memory/job/cordon");
  EXPECT_EQ(plan.v1_pids_parent, "/sys/fs/cgroup/pids/cordon");
  EXPECT_TRUE(host.made().contains("/sys/fs/cgroup/cpu,cpuacct/cordon"));
  EXPECT_EQ(plan.v2_kill, GroupKill::kCgroupKill);
  Probe p;
  p.capabilities = ResolveCapabilities(plan, false);
  EXPECT_TRUE(p.Status(Capability::kCpu).enforceable);
  EXPECT_EQ(p.Status(Capability::kCpu).mechanism, "cgroup1 cpu");
  EXPECT_EQ(p.Status(Capability::kProcessTree).mechanism, "cgroup2");
  EXPECT_EQ(p.Status(Capability::kProcessTree).teardown, "cgroup.kill");
}

TEST(HybridPlanTest, WithoutAV1CpuHierarchyTheOtherLimitsStillPlan) {
  const char* mountinfo =
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  const char* self = "8:pids:/\n4:memory:/\n0::/\n";
  HybridModel host;
  CgroupPlan plan = PlanCgroups(ParseCgroupLayout(mountinfo, self), {}, host);
  EXPECT_TRUE(plan.v1_cpu_parent.empty());
  EXPECT_EQ(plan.v1_cpu_problem, "no cgroup v1 cpu hierarchy is mounted");
  EXPECT_EQ(plan.v1_memory_parent, "/sys/fs/cgroup/memory/cordon");
  EXPECT_EQ(plan.v1_pids_parent, "/sys/fs/cgroup/pids/cordon");
  Probe p;
  p.capabilities = ResolveCapabilities(plan, false);
  const CapabilityStatus& cpu = p.Status(Capability::kCpu);
  EXPECT_FALSE(cpu.enforceable);
  EXPECT_NE(cpu.reason.find("no cgroup v1 cpu hierarchy"), std::string::npos) << cpu.reason;
  EXPECT_FALSE(cpu.fix.empty());
  EXPECT_TRUE(p.Status(Capability::kMemory).enforceable);
}

CgroupLayout PureV2(const std::string& own_path) {
  CgroupLayout l;
  l.v2 = Hierarchy{2,
                   {},
                   V2Model::kMount,
                   own_path,
                   own_path == "/" ? V2Model::kMount : V2Model::kMount + own_path};
  return l;
}

TEST(PureV2PlanTest, RootInAShellsGroupUsesAGroupAtTheTop) {
  V2Model host(/*root=*/true);
  host.AddGroup("/sys/fs/cgroup/user.slice", 0, {"memory", "pids"});
  host.AddGroup("/sys/fs/cgroup/user.slice/session-1.scope", /*procs=*/1);
  CgroupPlan plan = PlanCgroups(PureV2("/user.slice/session-1.scope"), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/cordon");
  EXPECT_EQ(plan.v2_controllers, (std::set<std::string>{"cpu", "memory", "pids"}));
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_NE(plan.notes[0].find("no internal processes"), std::string::npos);
  // The controllers really are handed to the grant groups below it.
  EXPECT_EQ(host.At("/sys/fs/cgroup/cordon").subtree,
            (std::set<std::string>{"cpu", "memory", "pids"}));
  // Nothing was enabled in the shell's own group (it holds a process).
  EXPECT_TRUE(host.At("/sys/fs/cgroup/user.slice/session-1.scope").subtree.empty());
}

TEST(PureV2PlanTest, AtTheRootGroupTheControllersComeDirectly) {
  V2Model host(true);
  CgroupPlan plan = PlanCgroups(PureV2("/"), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/cordon");
  EXPECT_EQ(plan.v2_controllers, (std::set<std::string>{"cpu", "memory", "pids"}));
  EXPECT_TRUE(plan.v1_memory_parent.empty());  // no v1 needed
  EXPECT_TRUE(plan.v1_cpu_parent.empty());
  EXPECT_TRUE(plan.v1_cpu_problem.empty());
  Probe p;
  p.capabilities = ResolveCapabilities(plan, false);
  EXPECT_EQ(p.Status(Capability::kCpu).mechanism, "cgroup2 cpu");
}

TEST(PureV2PlanTest, ACpuControllerThatCannotBeEnabledCostsNothingElse) {
  V2Model host(true);
  host.Refuse("cpu");
  CgroupPlan plan = PlanCgroups(PureV2("/"), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/cordon");
  EXPECT_EQ(plan.v2_controllers, (std::set<std::string>{"memory", "pids"}));
  // No v1 cpu hierarchy on a pure v2 host: cpu is left to the probe to report.
  EXPECT_NE(plan.v1_cpu_problem.find("no cgroup v1 cpu"), std::string::npos) << plan.v1_cpu_problem;
}

TEST(PureV2PlanTest, ACpuControllerNotDelegatedDoesNotMoveTheGroupsToTheTop) {
  // memory and pids reach the supervisor's group, cpu does not (as systemd
  // often delegates): the groups stay beneath it, where the host's limits
  // apply, and go without a CPU quota.
  V2Model host(true);
  host.AddGroup("/sys/fs/cgroup/system.slice", 0, {"memory", "pids"});
  host.AddGroup("/sys/fs/cgroup/system.slice/cordon.service", 0);
  CgroupPlan plan = PlanCgroups(PureV2("/system.slice/cordon.service"), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/system.slice/cordon.service/cordon");
  EXPECT_EQ(plan.v2_controllers, (std::set<std::string>{"memory", "pids"}));
  EXPECT_FALSE(plan.v1_cpu_problem.empty());
}

TEST(PureV2PlanTest, AnEmptyDelegatedGroupHandsItsControllersDown) {
  // A non-root supervisor whose service group is delegated to it and holds
  // no process of its own (it runs in a leaf beside cordon's groups).
  V2Model host(/*root=*/false, "/sys/fs/cgroup/user.slice/cordon.service");
  host.AddGroup("/sys/fs/cgroup/user.slice", 0, {"memory", "pids"});
  host.AddGroup("/sys/fs/cgroup/user.slice/cordon.service", 0);
  PlanOptions options;
  options.cgroup_root = "/user.slice/cordon.service/runs";
  CgroupPlan plan = PlanCgroups(PureV2("/user.slice/cordon.service/supervisor"), options, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/user.slice/cordon.service/runs");
  EXPECT_EQ(plan.v2_controllers, (std::set<std::string>{"memory", "pids"}));
}

TEST(PureV2PlanTest, AnUnprivilegedCallerWithoutDelegationGetsNoGroupAndIsToldWhy) {
  V2Model host(/*root=*/false);
  host.AddGroup("/sys/fs/cgroup/user.slice", 0, {"memory", "pids"});
  host.AddGroup("/sys/fs/cgroup/user.slice/session-1.scope", 1);
  CgroupPlan plan = PlanCgroups(PureV2("/user.slice/session-1.scope"), {}, host);
  EXPECT_TRUE(plan.v2_parent.empty());
  EXPECT_NE(plan.v2_problem.find("not delegated"), std::string::npos) << plan.v2_problem;
  EXPECT_NE(plan.v1_memory_problem.find("no cgroup v1 memory"), std::string::npos);
}

TEST(PureV2PlanTest, RootInAShellGroupWithAnExplicitRootDoesNotMoveToTheTop) {
  V2Model host(true);
  host.AddGroup("/sys/fs/cgroup/user.slice", 0, {"memory", "pids"});
  host.AddGroup("/sys/fs/cgroup/user.slice/session-1.scope", 1);
  PlanOptions options;
  options.cgroup_root = "/user.slice/session-1.scope/cordon";
  CgroupPlan plan = PlanCgroups(PureV2("/user.slice/session-1.scope"), options, host);
  // As asked, even though no controller can reach it: kill and membership only.
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/user.slice/session-1.scope/cordon");
  EXPECT_TRUE(plan.v2_controllers.empty());
}

// The probe of a pure v2 host as root, with isolation (namespaces) and the
// process tree of a run without it.
Probe ProbeOf(const CgroupPlan& plan) {
  IsolationSupport iso;
  iso.namespaces.available = iso.namespaces.network = true;
  iso.seccomp = iso.map_ids = true;
  Probe p;
  p.euid = 0;
  p.cgroups = plan;
  p.isolation = iso;
  p.capabilities = ResolveCapabilities(plan, /*nproc_effective=*/false, iso, /*root=*/true);
  for (const auto& s : ResolveCapabilities(plan, false)) {
    if (s.capability == Capability::kProcessTree) p.process_tree_unisolated = s;
  }
  return p;
}

TEST(PureV2PlanTest, WithCgroupKillTheTreeIsKilledWithIt) {
  V2Model host(true);
  CgroupPlan plan = PlanCgroups(PureV2("/"), {}, host);
  EXPECT_EQ(plan.v2_kill, GroupKill::kCgroupKill);
  Probe p = ProbeOf(plan);
  for (bool isolated : {true, false}) {
    EXPECT_EQ(p.StatusFor(Capability::kProcessTree, isolated).mechanism, "cgroup2");
    EXPECT_EQ(p.StatusFor(Capability::kProcessTree, isolated).teardown, "cgroup.kill");
  }
  EXPECT_EQ(ToJson(p)["teardown"]["unisolated"], "cgroup.kill");
}

// Debian 11's kernel (5.10): memory, pids and cpu in the tree, cgroup.freeze
// but no cgroup.kill. The limits use the controllers; only teardown changes.
TEST(PureV2PlanTest, WithoutCgroupKillTheLimitsStayAndTheTreeIsFrozenAndKilled) {
  V2Model host(true);
  host.WithoutKill();
  CgroupPlan plan = PlanCgroups(PureV2("/"), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/cordon");
  EXPECT_TRUE(plan.v2_problem.empty()) << plan.v2_problem;
  EXPECT_EQ(plan.v2_controllers, (std::set<std::string>{"cpu", "memory", "pids"}));
  EXPECT_EQ(plan.v2_kill, GroupKill::kFreezeKill);
  bool noted = false;
  for (const auto& n : plan.notes) noted |= n.find("no cgroup.kill") != std::string::npos;
  EXPECT_TRUE(noted);

  Probe p = ProbeOf(plan);
  EXPECT_EQ(p.Status(Capability::kMemory).mechanism, "cgroup2 memory");
  EXPECT_EQ(p.Status(Capability::kProcessCount).mechanism, "cgroup2 pids");
  EXPECT_EQ(p.Status(Capability::kCpu).mechanism, "cgroup2 cpu");
  for (Capability c : {Capability::kMemory, Capability::kProcessCount, Capability::kCpu}) {
    EXPECT_TRUE(p.Status(c).enforceable) << CapabilityName(c) << ": " << p.Status(c).reason;
  }
  // Isolated (the default): the sandbox's pid namespace is killed through
  // its init. Without isolation: the group is frozen and each member killed.
  const CapabilityStatus& isolated = p.StatusFor(Capability::kProcessTree, true);
  EXPECT_TRUE(isolated.enforceable);
  EXPECT_EQ(isolated.mechanism, "pid_namespace");
  EXPECT_EQ(isolated.teardown, "pid_namespace");
  const CapabilityStatus& plain = p.StatusFor(Capability::kProcessTree, false);
  EXPECT_TRUE(plain.enforceable) << plain.reason;
  EXPECT_EQ(plain.mechanism, "cgroup2+freeze");
  EXPECT_EQ(plain.teardown, "cgroup.freeze+kill");

  nlohmann::json j = ToJson(p);
  EXPECT_EQ(j["teardown"]["isolated"], "pid_namespace");
  EXPECT_EQ(j["teardown"]["unisolated"], "cgroup.freeze+kill");
  EXPECT_EQ(j["cgroups"]["v2_kill"], "cgroup.freeze+kill");
  EXPECT_TRUE(j["cgroups"]["problems"]["v2"].is_null());
  for (const auto& cap : j["capabilities"]) {
    if (cap["capability"] == "process_tree") {
      EXPECT_EQ(cap["teardown"], "pid_namespace");
    }
  }
}

TEST(PureV2PlanTest, WithoutKillOrFreezeOnlyThePidNamespaceHoldsTheTree) {
  V2Model host(true);
  host.WithoutKill();
  host.WithoutFreeze();
  CgroupPlan plan = PlanCgroups(PureV2("/"), {}, host);
  EXPECT_EQ(plan.v2_parent, "/sys/fs/cgroup/cordon");
  EXPECT_EQ(plan.v2_kill, GroupKill::kEach);
  Probe p = ProbeOf(plan);
  EXPECT_TRUE(p.Status(Capability::kMemory).enforceable);
  EXPECT_EQ(p.StatusFor(Capability::kProcessTree, true).mechanism, "pid_namespace");
  const CapabilityStatus& plain = p.StatusFor(Capability::kProcessTree, false);
  EXPECT_FALSE(plain.enforceable);
  EXPECT_EQ(plain.mechanism, "process_group");
  EXPECT_NE(plain.reason.find("cgroup.freeze"), std::string::npos) << plain.reason;
  EXPECT_FALSE(plain.fix.empty());
}

}  // namespace
}  // namespace cordon::contain
