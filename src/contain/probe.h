// What this host can enforce for this caller, per capability, and by which
// mechanism; when it cannot, why and what would fix it. Every claim rests
// on something observed (a group created, a control file present), never on
// the kernel version alone.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "contain/capability.h"
#include "contain/cgroup_plan.h"
#include "contain/disk.h"
#include "contain/namespaces.h"

namespace cordon::contain {

struct CapabilityStatus {
  Capability capability;
  bool enforceable = false;
  // The mechanism: the one that enforces it, or when not enforceable the
  // weaker one used instead ("process_group"), or "" when there is none.
  std::string mechanism;
  std::string reason;  // why it cannot be enforced
  std::string fix;     // what would make it enforceable
  // process_tree only: how the tree is killed at the end ("cgroup.kill",
  // "pid_namespace", "cgroup.freeze+kill", "process_group"); "" for the others.
  std::string teardown;
};

// What isolation can use here, each observed: a namespace made and used,
// the Landlock ABI the kernel reports, a seccomp query answered.
struct IsolationSupport {
  NamespaceSupport namespaces;
  int landlock_abi = 0;
  bool seccomp = false;
  // Root can give each sandbox its own outside id (from the default range).
  bool map_ids = false;
  // uid 0 of the initial user namespace: the host's root, not a container's
  // or a user namespace's.
  bool host_root = false;
  // What would make namespaces usable, where the probe knows better than
  // the generic advice (a masked /proc: unmask it); "" for the generic one.
  std::string namespaces_fix;
};

struct Probe {
  uid_t euid = 0;
  CgroupPlan cgroups;
  IsolationSupport isolation;
  // One per Capability, in kAllCapabilities order, for an isolated run
  // (the default): process_tree may rest on the pid namespace.
  std::vector<CapabilityStatus> capabilities;
  // process_tree for a run without isolation (no pid namespace to use);
  // unset: the same as for an isolated run.
  std::optional<CapabilityStatus> process_tree_unisolated;
  // What can bound the daemon's workspaces (none probed for the CLI).
  DiskSupport disk;

  const CapabilityStatus& Status(Capability c) const;
  const CapabilityStatus& StatusFor(Capability c, bool isolated) const;
  // No user namespace can be made, and root gives each sandbox a leased
  // uid of its own instead (privileges: leased_uid+no_new_privs): such a
  // sandbox reaches its workspace by its host path, as that uid.
  bool SandboxesRunAsOwnUids() const {
    return euid == 0 && !isolation.namespaces.available && isolation.map_ids;
  }
};

struct ProbeOptions {
  PlanOptions cgroups;
  // Observe what isolation can use (a namespace made, ~0.2 ms); a caller
  // that runs without isolation skips it and gets none.
  bool isolation = true;
  // The daemon's state directory: where its workspaces go, and so where a
  // disk bound is probed. Empty (the CLI): `disk` is not enforceable.
  std::string state_dir;
  // Workspace images are reserved whole (DiskSupport::reserve_images).
  bool reserve_images = false;
};

// Observes this host: cgroup hierarchies (preparing cordon's parent groups),
// privileges, and what follows for each capability.
sys::Result<Probe> ProbeHost(const ProbeOptions& options);

// {"euid", "capabilities": [{capability, enforceable, mechanism, reason, fix}
//  (process_tree: also "teardown")], "teardown": {"isolated", "unisolated"},
//  "cgroups": {...}, "isolation": {...}, "disk": {...}}: what
// `cordon probe --json` and GET /v1/probe show.
nlohmann::json ToJson(const Probe& probe);

// Pure: the capability table that follows from a cgroup plan, privileges,
// isolation support and disk support (none by default).
std::vector<CapabilityStatus> ResolveCapabilities(const CgroupPlan& plan, bool nproc_effective,
                                                  const IsolationSupport& isolation = {},
                                                  bool root = false, const DiskSupport& disk = {});

// What a launch does first in its namespaces, tried: a fresh procfs mounted
// in a new user, mount and pid namespace. nullopt when it can be mounted;
// otherwise why not, naming what this /proc has mounted over it (a
// container's masked paths). About a millisecond; ProbeHost tries it only
// where /proc is not plain (something is mounted beneath it, or it is
// read-only).
std::optional<std::string> FreshProcProblem();

// Whether RLIMIT_NPROC binds a child with this process's credentials: it is
// not enforced for uid 0 nor with CAP_SYS_ADMIN or CAP_SYS_RESOURCE.
bool NprocLimitEffective();

}  // namespace cordon::contain
