// Admission: a Spec becomes a Grant once every capability it wants is
// resolved against the Probe, and the grant is recorded `active` before
// anything is spawned (DESIGN.md §4.1).
#pragma once

#include <expected>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "contain/grant_cgroups.h"
#include "contain/id_lease.h"
#include "contain/probe.h"
#include "contain/spec.h"
#include "store/store.h"

namespace cordon::contain {

struct Degradation {
  Capability capability;
  std::string reason;
};

// How a grant is isolated, as admission decided it from the probe.
struct GrantIsolation {
  bool namespaces = false;  // user, mount, pid, IPC, UTS (and network) namespaces
  int landlock_abi = 0;     // 0: no Landlock
  bool seccomp = false;
  // The outside ids of the sandbox's root: a leased id (root supervisor)
  // or the caller's own.
  uint32_t outside_uid = 0;
  uint32_t outside_gid = 0;
  std::optional<IdLease> lease;
};

struct Grant {
  std::string id;
  std::string owner;
  std::vector<Capability> enforced;
  std::vector<Degradation> degraded;
  std::map<Capability, std::string> mechanisms;
  std::optional<GrantCgroups> cgroups;
  std::optional<GrantIsolation> isolation;  // none with --isolation none

  bool Enforces(Capability c) const;
  const std::string& Mechanism(Capability c) const;  // "" when none
};

struct AdmitError {
  enum class Kind {
    kInvalid,   // the spec is wrong: `field` and `message` say how
    kRefused,   // a required capability cannot be enforced: see `missing`
    kInternal,  // cordon or the host failed (store, cgroup)
  };
  Kind kind;
  std::string field;
  std::string message;
  std::vector<Degradation> missing;
};

// Validates `spec`, resolves each wanted capability, refuses when one that is
// required (or asked for by an explicit limit, unless permissive) cannot be
// enforced, creates the grant's cgroups and records the grant as `active`.
// `disk`, when given, is the status of `disk` for this grant (a caller whose
// bounding of the workspace failed passes why); otherwise the workspace's
// bound is observed (contain/disk.h WorkspaceDiskStatus).
std::expected<Grant, AdmitError> Acquire(const Spec& spec, const Probe& probe, store::Store& store,
                                         const CapabilityStatus* disk = nullptr);

// A random UUID (version 4).
std::string NewGrantId();

// The summary of a spec kept in the store: no env values, no stdin bytes.
nlohmann::json SpecSummary(const Spec& spec);

// {"timeout_ms", "memory_bytes", "pids", "cpu", "disk_bytes", ...}: the limits
// that are set (the effective ones, once the daemon's defaults were applied).
nlohmann::json LimitsJson(const Limits& limits);

}  // namespace cordon::contain
