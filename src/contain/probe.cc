#include "contain/probe.h"

#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "contain/landlock.h"
#include "contain/probe_cache.h"
#include "contain/seccomp.h"

namespace cordon::contain {
namespace {

constexpr const char* kNamespaceFix =
    "allow user namespaces for this user (sysctl kernel.unprivileged_userns_clone=1, "
    "user.max_user_namespaces > 0, or an AppArmor profile that permits them for cordon), or run "
    "cordon as root";

constexpr const char* kCgroupFix =
    "run as root, or inside a cgroup delegated to this user, or name a writable one with "
    "--cgroup-root";

constexpr const char* kMaskedProcFix =
    "unmask /proc for cordon's container: podman --security-opt unmask=ALL, docker "
    "--security-opt systempaths=unconfined, Kubernetes securityContext procMount: Unmasked (with "
    "hostUsers: false); or run it --privileged";

// A mount of this process's namespace, from /proc/self/mountinfo.
struct MountLine {
  std::string point;    // octal escapes kept (only compared and shown)
  std::string options;  // the per-mount ones ("rw,nosuid,...")
  std::string fstype;
};

std::vector<MountLine> ParseMounts(const std::string& info) {
  std::vector<MountLine> out;
  std::istringstream in(info);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, word;
    MountLine m;
    f >> id >> parent >> dev >> root >> m.point >> m.options;
    while (f >> word && word != "-") {
    }
    f >> m.fstype;
    out.push_back(std::move(m));
  }
  return out;
}

sys::Result<std::string> ReadMountInfo() { return sys::ReadFile("/proc/self/mountinfo", 16 << 20); }

std::vector<MountLine> ReadMounts() {
  auto info = ReadMountInfo();
  return info ? ParseMounts(*info) : std::vector<MountLine>{};
}

// The mount points beneath /proc: what a container runtime masks
// (/proc/kcore, /proc/sys, ...), and what makes the kernel refuse a fresh
// procfs in a user namespace.
std::vector<std::string> OverProc(const std::vector<MountLine>& mounts) {
  std::vector<std::string> out;
  for (const auto& m : mounts) {
    if (m.point.starts_with("/proc/")) out.push_back(m.point);
  }
  return out;
}

// Whether a fresh procfs is certainly allowed, untried: the kernel lets a
// user namespace mount one when a procfs of its mount namespace is fully
// visible (fs/namespace.c, mnt_already_visible): nothing mounted beneath
// it but on its permanently empty directories, and no locked flag (ro) the
// new mount would drop. A read-write /proc with nothing beneath it is.
bool PlainProc(const std::vector<MountLine>& mounts) {
  bool plain = false;
  for (const auto& m : mounts) {
    if (m.point.starts_with("/proc/")) return false;
    if (m.fstype == "proc" && m.point == "/proc" &&
        (m.options == "rw" || m.options.starts_with("rw,"))) {
      plain = true;
    }
  }
  return plain;
}

// The trial child shares our memory and we are suspended until it has
// exited (CLONE_VM | CLONE_VFORK); it reports the call that failed.
struct ProcTrial {
  alignas(16) char stack[8192];
  const char* failed = nullptr;
  int err = 0;
};

// As the launch's kProc mount step (mounts.cc), in namespaces of its own:
// nothing it mounts is seen outside, and all of it goes when it exits.
int ProcTrialMain(void* arg) {
  auto* t = static_cast<ProcTrial*>(arg);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    t->failed = "mount(\"/\", MS_REC | MS_PRIVATE)";
    t->err = errno;
  } else if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    t->failed = "mount(\"proc\", \"/proc\", \"proc\")";
    t->err = errno;
  }
  ::_exit(0);
}

CapabilityStatus Enforced(Capability c, std::string mechanism) {
  return CapabilityStatus{c, true, std::move(mechanism), "", ""};
}

CapabilityStatus Unavailable(Capability c, std::string fallback, std::string reason,
                             std::string fix) {
  return CapabilityStatus{c, false, std::move(fallback), std::move(reason), std::move(fix)};
}

CapabilityStatus LimitStatus(Capability c, const CgroupPlan& plan, const std::string& controller,
                             const std::string& v1_parent, const std::string& v1_problem) {
  if (plan.v2_controllers.contains(controller)) return Enforced(c, "cgroup2 " + controller);
  if (!v1_parent.empty()) return Enforced(c, "cgroup1 " + controller);
  std::string reason = "no writable " + controller + " cgroup: " +
                       (plan.v2_problem.empty() ? "cgroup v2 groups under " + plan.v2_parent +
                                                      " have no " + controller + " controller"
                                                : plan.v2_problem);
  if (!v1_problem.empty()) reason += "; " + v1_problem;
  return Unavailable(c, "", reason, kCgroupFix);
}

// The strongest way to hold the tree and kill it: a v2 group with
// cgroup.kill; the sandbox's pid namespace; a v2 group frozen and killed
// member by member (cgroup.freeze, before Linux 5.14). `teardown` names it.
CapabilityStatus ProcessTreeStatus(const CgroupPlan& plan, const IsolationSupport& isolation) {
  constexpr Capability c = Capability::kProcessTree;
  bool v2 = !plan.v2_parent.empty();
  CapabilityStatus s;
  if (v2 && plan.v2_kill == GroupKill::kCgroupKill) {
    s = Enforced(c, "cgroup2");
  } else if (isolation.namespaces.available) {
    // The init of the sandbox's pid namespace holds every descendant:
    // killing it kills them all, and its exit proves they are gone. (A v2
    // group that holds the limits is frozen and emptied as well.)
    s = Enforced(c, "pid_namespace");
  } else if (v2 && plan.v2_kill == GroupKill::kFreezeKill) {
    // Frozen, no member runs, so none forks: killing each one empties the
    // group, and "populated 0" proves it.
    s = Enforced(c, "cgroup2+freeze");
  } else if (v2) {
    return Unavailable(c, "process_group",
                       "cgroup v2 groups under " + plan.v2_parent +
                           " have neither cgroup.kill (Linux 5.14) nor cgroup.freeze (Linux "
                           "5.2): their members can only be killed one by one, which a fork "
                           "loop can outrun",
                       "a kernel of Linux 5.14 or later, or run with isolation (a pid namespace "
                       "holds the tree)");
  } else {
    s = Unavailable(c, "process_group",
                    "no usable cgroup v2 group (" + plan.v2_problem +
                        "); a process group does not hold descendants that call setsid()",
                    kCgroupFix);
  }
  s.teardown = s.mechanism == "cgroup2"          ? "cgroup.kill"
               : s.mechanism == "cgroup2+freeze" ? "cgroup.freeze+kill"
                                                 : s.mechanism;
  return s;
}

CapabilityStatus IsolationStatus(Capability c, const IsolationSupport& iso, bool root) {
  const NamespaceSupport& ns = iso.namespaces;
  bool landlock = iso.landlock_abi > 0;
  // A problem that is not the namespace itself (a masked /proc) says so.
  std::string no_ns =
      iso.namespaces_fix.empty() ? "no user namespace can be made: " + ns.problem : ns.problem;
  const std::string ns_fix = iso.namespaces_fix.empty() ? kNamespaceFix : iso.namespaces_fix;
  switch (c) {
    case Capability::kFilesystem:
      if (ns.available)
        return Enforced(c, landlock ? "mount_namespace+landlock" : "mount_namespace");
      // Where namespaces are refused, Landlock alone keeps the filesystem
      // policy: reads and writes outside the declared paths fail.
      if (landlock) return Enforced(c, "landlock");
      return Unavailable(c, "", no_ns + "; and this kernel has no Landlock", ns_fix);
    case Capability::kNetwork:
      if (ns.available && ns.network) return Enforced(c, "network_namespace");
      return Unavailable(
          c, iso.seccomp ? "seccomp" : "",
          (ns.available ? "network namespaces are switched off (user.max_net_namespaces is 0)"
                        : no_ns) +
              (iso.seccomp ? "; seccomp refuses IP sockets, but the host's Unix sockets stay "
                             "reachable"
                           : "") +
              (iso.landlock_abi >= 6 ? " (Landlock keeps abstract ones out)" : ""),
          ns_fix);
    case Capability::kProcessView:
      if (ns.available) return Enforced(c, "pid_namespace");
      return Unavailable(c, iso.landlock_abi >= 6 ? "landlock" : "",
                         no_ns + "; host processes stay visible in /proc" +
                             (iso.landlock_abi >= 6 ? " (Landlock keeps signals to them out)" : ""),
                         ns_fix);
    case Capability::kSyscallFilter:
      if (iso.seccomp) return Enforced(c, "seccomp");
      return Unavailable(c, "", "this kernel takes no seccomp filters",
                         "a kernel built with CONFIG_SECCOMP_FILTER");
    case Capability::kPrivileges:
      // Without a user namespace a sandbox of root's would keep uid 0 on
      // the host: its capabilities dropped, but what root owns (most of
      // /proc/sys, root's files where Landlock lets it reach them) still
      // writable by its owner's mode bits. (Found by the host matrix's
      // no-userns cell: core_pattern was written.) So root gives it an
      // unprivileged uid of its own, leased as a user namespace's outside
      // id is; where root cannot (no CAP_SETUID), nothing stands in.
      if (!ns.available && root && iso.map_ids) return Enforced(c, "leased_uid+no_new_privs");
      if (!ns.available && iso.host_root) {
        return Unavailable(c, "no_new_privs",
                           no_ns +
                               "; and this root cannot switch a sandbox to a uid of its own "
                               "(it lacks CAP_SETUID/CAP_SETGID or the uid_range), so the "
                               "sandbox would run as uid 0 on the host, where what root owns "
                               "(most of /proc/sys among it) stays writable to it",
                           ns_fix);
      }
      if (!ns.available) return Enforced(c, "no_new_privs");
      if (root && !iso.map_ids) {
        return Unavailable(c, "no_new_privs",
                           "a sandbox would be uid 0 outside: this root lacks CAP_SETUID/"
                           "CAP_SETGID or the uid_range is not mapped in its user namespace",
                           "give cordon CAP_SETUID and CAP_SETGID and a uid_range mapped here");
      }
      return Enforced(c, "user_namespace+no_new_privs");
    default:
      return Unavailable(c, "", "not an isolation capability", "");
  }
}

// Whether this process is in the initial user namespace (its uid_map maps
// every id); none when /proc cannot say.
std::optional<bool> InInitialUserNamespace() {
  auto map = sys::ReadFile("/proc/self/uid_map", 4096);
  if (!map) return std::nullopt;
  return map->find("4294967295") != std::string::npos;
}

bool NprocLimitEffectiveFor(std::optional<bool> initial_userns) {
  // Inside a user namespace (a container, or the restricted host of
  // LINUX-NOTES.md) uid 0 holds no capability where the limit is checked.
  // (The kernel asks for CAP_SYS_RESOURCE/CAP_SYS_ADMIN in the initial one.)
  if (initial_userns == false) return true;
  if (::getuid() == 0 || ::geteuid() == 0) return false;
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  auto has = [&](int cap) { return (data[cap / 32].effective & (1u << (cap % 32))) != 0; };
  return !has(CAP_SYS_ADMIN) && !has(CAP_SYS_RESOURCE);
}

}  // namespace

const CapabilityStatus& Probe::StatusFor(Capability c, bool isolated) const {
  if (!isolated && c == Capability::kProcessTree && process_tree_unisolated) {
    return *process_tree_unisolated;
  }
  return Status(c);
}

const CapabilityStatus& Probe::Status(Capability c) const {
  for (const auto& s : capabilities) {
    if (s.capability == c) return s;
  }
  // Every capability has a status: ResolveCapabilities fills all of them.
  std::abort();
}

std::optional<std::string> FreshProcProblem() {
  ProcTrial trial;
  pid_t pid = ::clone(ProcTrialMain, trial.stack + sizeof trial.stack,
                      CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_VM | CLONE_VFORK | SIGCHLD,
                      &trial);
  if (pid < 0) {
    const int err = errno;
    return std::string(
               "cannot make a user, mount and pid namespace to try a fresh /proc in: "
               "clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID): ") +
           sys::ErrnoName(err) + " (" + std::strerror(err) + ")";
  }
  ::waitpid(pid, nullptr, __WALL);
  if (!trial.failed) return std::nullopt;
  std::string problem = std::string("a sandbox cannot mount its own /proc in its namespaces (") +
                        trial.failed + ": " + sys::ErrnoName(trial.err) + " (" +
                        std::strerror(trial.err) + "))";
  std::vector<std::string> over = OverProc(ReadMounts());
  if (trial.err == EPERM && !over.empty()) {
    std::string shown;
    for (size_t i = 0; i < over.size() && i < 5; ++i) shown += (i ? ", " : "") + over[i];
    if (over.size() > 5) shown += " and " + std::to_string(over.size() - 5) + " more";
    problem += ": this /proc has paths masked by mounts over them (" + shown +
               ", as a container runtime masks them), and the kernel refuses a user namespace "
               "a new procfs that would reveal what they hide; sandboxes run without namespaces";
  }
  return problem;
}

bool NprocLimitEffective() { return NprocLimitEffectiveFor(InInitialUserNamespace()); }

std::vector<CapabilityStatus> ResolveCapabilities(const CgroupPlan& plan, bool nproc_effective,
                                                  const IsolationSupport& isolation, bool root,
                                                  const DiskSupport& disk) {
  std::vector<CapabilityStatus> out;
  for (Capability c : kAllCapabilities) {
    switch (c) {
      case Capability::kProcessTree:
        out.push_back(ProcessTreeStatus(plan, isolation));
        break;
      case Capability::kWallClock:
      case Capability::kOutputCap:
        out.push_back(Enforced(c, "supervisor"));
        break;
      case Capability::kMemory:
        out.push_back(
            LimitStatus(c, plan, "memory", plan.v1_memory_parent, plan.v1_memory_problem));
        break;
      case Capability::kProcessCount: {
        CapabilityStatus s =
            LimitStatus(c, plan, "pids", plan.v1_pids_parent, plan.v1_pids_problem);
        if (!s.enforceable && nproc_effective) {
          s = Enforced(c, "rlimit");
        } else if (!s.enforceable) {
          s.reason += "; RLIMIT_NPROC is not enforced for root or with CAP_SYS_RESOURCE";
        }
        out.push_back(std::move(s));
        break;
      }
      case Capability::kCpu:
        out.push_back(LimitStatus(c, plan, "cpu", plan.v1_cpu_parent, plan.v1_cpu_problem));
        break;
      case Capability::kDisk:
        // Both kinds of the daemon's workspaces: where a tmpfs bounds a
        // run's but nothing bounds a session's (no loop devices, no project
        // quotas), the host's claim is not made, and its reason says what
        // is missing. Each grant's own is observed again at admission
        // (contain/disk.h): a run's disk_bytes is then bounded all the same.
        out.push_back(DiskProbeStatus(disk));
        break;
      case Capability::kAddressSpace:
      case Capability::kCpuTime:
      case Capability::kFileSize:
      case Capability::kOpenFiles:
        out.push_back(Enforced(c, "rlimit"));
        break;
      case Capability::kFilesystem:
      case Capability::kNetwork:
      case Capability::kProcessView:
      case Capability::kSyscallFilter:
      case Capability::kPrivileges:
        out.push_back(IsolationStatus(c, isolation, root));
        break;
    }
  }
  return out;
}

nlohmann::json ToJson(const Probe& probe) {
  using nlohmann::json;
  auto opt = [](const std::string& s) { return s.empty() ? json() : json(s); };
  json caps = json::array();
  for (const auto& s : probe.capabilities) {
    json entry = {{"capability", CapabilityName(s.capability)},
                  {"enforceable", s.enforceable},
                  {"mechanism", opt(s.mechanism)},
                  {"reason", opt(s.reason)},
                  {"fix", opt(s.fix)}};
    if (s.capability == Capability::kProcessTree) entry["teardown"] = opt(s.teardown);
    caps.push_back(std::move(entry));
  }
  // How a run's tree is killed, with isolation (the default) and without.
  json teardown = {{"isolated", json()}, {"unisolated", json()}};
  for (const auto& s : probe.capabilities) {
    if (s.capability != Capability::kProcessTree) continue;
    teardown["isolated"] = opt(s.teardown);
    teardown["unisolated"] = opt(probe.StatusFor(s.capability, false).teardown);
  }
  const CgroupPlan& c = probe.cgroups;
  json cgroups = {
      {"v2_parent", opt(c.v2_parent)},
      {"v2_controllers", c.v2_controllers},
      {"v2_kill", c.v2_parent.empty() ? json() : json(GroupKillName(c.v2_kill))},
      {"v1_memory_parent", opt(c.v1_memory_parent)},
      {"v1_pids_parent", opt(c.v1_pids_parent)},
      {"v1_cpu_parent", opt(c.v1_cpu_parent)},
      {"problems",
       {{"v2", opt(c.v2_problem)},
        {"v1_memory", opt(c.v1_memory_problem)},
        {"v1_pids", opt(c.v1_pids_problem)},
        {"v1_cpu", opt(c.v1_cpu_problem)}}},
      {"notes", c.notes},
  };
  const IsolationSupport& i = probe.isolation;
  json isolation = {
      {"namespaces", i.namespaces.available},    {"namespaces_problem", opt(i.namespaces.problem)},
      {"namespaces_fix", opt(i.namespaces_fix)}, {"network_namespaces", i.namespaces.network},
      {"landlock_abi", i.landlock_abi},          {"seccomp", i.seccomp},
      {"own_uid_per_sandbox", i.map_ids},
  };
  return {{"euid", probe.euid}, {"capabilities", caps},   {"teardown", teardown},
          {"cgroups", cgroups}, {"isolation", isolation}, {"disk", ToJson(probe.disk)}};
}

namespace {

// ProbeHost's body; `cache_file` (ProbeHostCached) supplies the namespace
// observation when it holds one for this process's facts.
sys::Result<Probe> Observe(const ProbeOptions& options, const std::string* cache_file) {
  Probe probe;
  probe.euid = ::geteuid();
  // Read once: the cgroup layout and the isolation checks both look.
  auto mountinfo = ReadMountInfo();
  auto own_cgroup = sys::ReadFile("/proc/self/cgroup");
  const std::optional<bool> initial_userns = InInitialUserNamespace();
  if (mountinfo && own_cgroup) {
    probe.cgroups = PlanCgroups(ParseCgroupLayout(*mountinfo, *own_cgroup), options.cgroups);
  } else {
    const sys::Error& unread = mountinfo ? own_cgroup.error() : mountinfo.error();
    probe.cgroups.v2_problem = "cannot read the cgroup layout: " + unread.message();
    probe.cgroups.v1_memory_problem = probe.cgroups.v2_problem;
    probe.cgroups.v1_pids_problem = probe.cgroups.v2_problem;
    probe.cgroups.v1_cpu_problem = probe.cgroups.v2_problem;
  }
  if (options.isolation) {
    std::string key;
    std::optional<NamespaceSupport> cached;
    if (cache_file) {
      key = NamespaceProbeKey();
      cached = LoadNamespaceProbe(*cache_file, key);
    }
    probe.isolation.namespaces = cached ? *cached : ProbeNamespaces();
    if (cache_file && !cached && probe.isolation.namespaces.available) {
      (void)SaveNamespaceProbe(*cache_file, key, probe.isolation.namespaces);
    }
    // Namespaces that can be made may still be of no use: every launch
    // mounts a fresh /proc in them, which a masked /proc forbids.
    if (probe.isolation.namespaces.available &&
        !PlainProc(mountinfo ? ParseMounts(*mountinfo) : std::vector<MountLine>{})) {
      if (auto problem = FreshProcProblem()) {
        probe.isolation.namespaces.available = false;
        probe.isolation.namespaces.problem = *problem;
        probe.isolation.namespaces_fix = kMaskedProcFix;
      }
    }
    probe.isolation.landlock_abi = LandlockAbi();
    probe.isolation.seccomp = SeccompAvailable();
    probe.isolation.map_ids = CanMapIdRange(kDefaultIdRange);
    probe.isolation.host_root = ::geteuid() == 0 && initial_userns == true;
  } else {
    probe.isolation.namespaces.problem = "not probed (no isolation was asked for)";
  }
  if (!options.state_dir.empty()) {
    probe.disk = ProbeDisk(options.state_dir, options.reserve_images);
  }
  bool nproc = NprocLimitEffectiveFor(initial_userns);
  probe.capabilities =
      ResolveCapabilities(probe.cgroups, nproc, probe.isolation, probe.euid == 0, probe.disk);
  for (const auto& s : ResolveCapabilities(probe.cgroups, nproc)) {
    if (s.capability == Capability::kProcessTree) probe.process_tree_unisolated = s;
  }
  return probe;
}

}  // namespace

sys::Result<Probe> ProbeHost(const ProbeOptions& options) { return Observe(options, nullptr); }

sys::Result<Probe> ProbeHostCached(const ProbeOptions& options, const std::string& cache_file) {
  return Observe(options, &cache_file);
}

}  // namespace cordon::contain
