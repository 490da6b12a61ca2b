#include "contain/grant.h"

#include <unistd.h>

#include "sys/random.h"

namespace cordon::contain {
namespace {

using nlohmann::json;

bool CgroupBacked(const std::string& mechanism) { return mechanism.starts_with("cgroup"); }

struct Resolution {
  std::vector<Capability> enforced;
  std::vector<Degradation> degraded;
  std::map<Capability, std::string> mechanisms;
  std::vector<Degradation> missing;
  std::vector<bool> missing_is_explicit;
};

// `disk` of this grant: the caller's word, else the workspace as it is now.
CapabilityStatus DiskFor(const Spec& spec, const Probe& probe, const CapabilityStatus* disk) {
  if (disk) return *disk;
  // A sandbox without a user namespace keeps a root supervisor's
  // CAP_SYS_RESOURCE, which ext4 lets past a project quota.
  bool privileged =
      probe.euid == 0 && !(spec.isolation.enabled() && probe.isolation.namespaces.available);
  return WorkspaceDiskStatus(probe.disk, spec.workspace ? spec.workspace->string() : "",
                             DiskLimits{spec.limits.disk_bytes, spec.limits.disk_inodes},
                             privileged);
}

// `broken`: capabilities whose mechanism failed when the grant was set up.
Resolution Resolve(const Spec& spec, const Probe& probe,
                   const std::map<Capability, std::string>& broken, const CapabilityStatus* disk) {
  Resolution r;
  std::set<Capability> explicit_caps = Explicit(spec);
  std::set<Capability> wanted = Wanted(spec);
  // Required, but nothing sets it up: enforced would be a claim about
  // nothing (--require network with --network host).
  for (Capability c : spec.required) {
    if (wanted.contains(c)) continue;
    r.missing.push_back({c, NotWantedReason(spec, c)});
    r.missing_is_explicit.push_back(false);
  }
  for (Capability c : wanted) {
    CapabilityStatus s = c == Capability::kDisk ? DiskFor(spec, probe, disk)
                                                : probe.StatusFor(c, spec.isolation.enabled());
    if (auto b = broken.find(c); b != broken.end()) {
      s = CapabilityStatus{c, false, c == Capability::kProcessTree ? "process_group" : "",
                           b->second, s.fix};
    }
    if (s.enforceable) {
      r.enforced.push_back(c);
      r.mechanisms[c] = s.mechanism;
      continue;
    }
    std::string reason = s.reason + (s.fix.empty() ? "" : " (to fix: " + s.fix + ")");
    bool is_explicit = explicit_caps.contains(c);
    if (spec.required.contains(c) || (is_explicit && !spec.permissive)) {
      r.missing.push_back({c, reason});
      r.missing_is_explicit.push_back(is_explicit && !spec.required.contains(c));
      continue;
    }
    r.degraded.push_back({c, s.reason});
    if (!s.mechanism.empty()) r.mechanisms[c] = s.mechanism;
  }
  return r;
}

AdmitError Refusal(const Resolution& r) {
  std::string message = "refused: cannot enforce ";
  bool any_explicit = false;
  for (size_t i = 0; i < r.missing.size(); ++i) {
    message += (i ? "; " : "") + std::string(CapabilityName(r.missing[i].capability)) + ": " +
               r.missing[i].reason;
    any_explicit |= r.missing_is_explicit[i];
  }
  if (any_explicit) message += "; use --permissive to run without what cannot be enforced";
  return AdmitError{AdmitError::Kind::kRefused, "", message, r.missing};
}

std::string Dirname(const std::string& path) { return path.substr(0, path.rfind('/')); }

// The namespaces, Landlock and seccomp as the probe found them, and the
// outside id of the sandbox: as root, one of the range (leased where every
// root supervisor of the host leases: IdLeaseDir); otherwise the caller's
// own. Without a user namespace the leased id is the uid the sandbox runs
// as (never root's own uid 0).
sys::Result<GrantIsolation> DecideIsolation(const Spec& spec, const Probe& probe,
                                            store::Store& store) {
  const IsolationSupport& support = probe.isolation;
  GrantIsolation g;
  g.namespaces = support.namespaces.available;
  g.landlock_abi = support.landlock_abi;
  g.seccomp = support.seccomp;
  g.outside_uid = ::getuid();
  g.outside_gid = ::getgid();
  IdRange range = spec.isolation.id_range;
  bool map_ids = range == kDefaultIdRange ? support.map_ids : CanMapIdRange(range);
  if (map_ids) {
    CORDON_ASSIGN_OR_RETURN(IdLease lease,
                            IdLease::Acquire(IdLeaseDir(Dirname(store.path())), range));
    g.outside_uid = g.outside_gid = lease.id();
    g.lease = std::move(lease);
  }
  return g;
}

}  // namespace

bool Grant::Enforces(Capability c) const {
  return std::find(enforced.begin(), enforced.end(), c) != enforced.end();
}

const std::string& Grant::Mechanism(Capability c) const {
  static const std::string kNone;
  auto it = mechanisms.find(c);
  return it == mechanisms.end() ? kNone : it->second;
}

std::string NewGrantId() { return sys::RandomUuid(); }

json LimitsJson(const Limits& l) {
  json limits = {{"grace_ms", l.grace_ms}, {"output_limit_bytes", l.output_limit_bytes}};
  auto put = [&](const char* name, const std::optional<int64_t>& v) {
    if (v) limits[name] = *v;
  };
  put("timeout_ms", l.timeout_ms);
  put("memory_bytes", l.memory_bytes);
  put("pids", l.pids);
  put("cpu_seconds", l.cpu_seconds);
  put("file_size_bytes", l.file_size_bytes);
  put("open_files", l.open_files);
  put("address_space_bytes", l.address_space_bytes);
  put("disk_bytes", l.disk_bytes);
  put("disk_inodes", l.disk_inodes);
  if (l.cpu) limits["cpu"] = *l.cpu;
  return limits;
}

json SpecSummary(const Spec& spec) {
  json s;
  if (spec.shell) {
    s["shell"] = *spec.shell;
  } else {
    s["argv"] = spec.argv;
  }
  s["workspace"] = spec.workspace ? json(spec.workspace->string()) : json();
  json names = json::array();
  for (const auto& [name, value] : spec.env) names.push_back(name);
  s["env_names"] = names;
  s["stdin_bytes"] = spec.stdin_bytes ? json(spec.stdin_bytes->size()) : json();
  s["limits"] = LimitsJson(spec.limits);
  json defaulted = json::array();
  for (Capability c : spec.defaulted) defaulted.push_back(CapabilityName(c));
  s["defaulted"] = defaulted;  // limits that are the daemon's defaults, not asked for
  json required = json::array();
  for (Capability c : spec.required) required.push_back(CapabilityName(c));
  s["required"] = required;
  s["permissive"] = spec.permissive;
  const IsolationSpec& iso = spec.isolation;
  json binds = json::array();
  for (const Bind& b : iso.binds) {
    binds.push_back({{"src", b.source}, {"dst", b.target}, {"writable", b.writable}});
  }
  s["isolation"] = {{"level", IsolationName(iso.level)},
                    {"network", NetworkName(iso.network)},
                    {"binds", binds},
                    {"tmp_size_bytes", iso.tmp_size_bytes},
                    {"private_workspace", iso.private_workspace}};
  return s;
}

namespace {

// The grant as the store keeps it, its groups at `paths`.
store::GrantRecord RecordOf(const Grant& grant, const Spec& spec, const CgroupPaths& paths,
                            const proc::Identity& supervisor) {
  store::GrantRecord record;
  record.id = grant.id;
  record.owner = grant.owner;
  record.spec = SpecSummary(spec);
  for (Capability c : grant.enforced) record.enforced.push_back(CapabilityName(c));
  for (const auto& d : grant.degraded) {
    record.degraded.push_back({{"capability", CapabilityName(d.capability)}, {"reason", d.reason}});
  }
  for (const auto& [c, m] : grant.mechanisms) record.mechanisms[std::string(CapabilityName(c))] = m;
  record.cgroups = ToJson(paths);
  record.supervisor = supervisor;
  record.created_at_ms = store::NowMs();
  return record;
}

}  // namespace

std::expected<Grant, AdmitError> Acquire(const Spec& spec, const Probe& probe, store::Store& store,
                                         const CapabilityStatus* disk) {
  if (auto invalid = Validate(spec)) {
    return std::unexpected(
        AdmitError{AdmitError::Kind::kInvalid, invalid->field, invalid->message(), {}});
  }
  Grant grant;
  grant.id = NewGrantId();
  grant.owner = spec.owner;
  auto internal = [](std::string message) {
    return std::unexpected(AdmitError{AdmitError::Kind::kInternal, "", std::move(message), {}});
  };
  auto self = proc::ReadIdentity(::getpid());
  if (!self) return internal("cannot read the supervisor's identity: " + self.error().message());

  // Resolve, record, then set up the cgroups; if setting them up fails,
  // what they would have enforced is re-resolved as unavailable (refused or
  // degraded). The grant is in the store, with where its groups will be,
  // before any group exists: a supervisor killed in between leaves a record
  // that reap finishes, never a group that no record names.
  std::map<Capability, std::string> broken;
  for (int attempt = 0;; ++attempt) {
    Resolution r = Resolve(spec, probe, broken, disk);
    if (!r.missing.empty()) return std::unexpected(Refusal(r));
    if (spec.isolation.enabled() && !grant.isolation) {
      auto isolation = DecideIsolation(spec, probe, store);
      if (!isolation) {
        return internal("cannot take an id for the sandbox: " + isolation.error().message() +
                        " (name another range with uid_range in a --policy)");
      }
      grant.isolation = std::move(*isolation);
    }
    grant.enforced = r.enforced;
    grant.degraded = r.degraded;
    grant.mechanisms = r.mechanisms;
    auto mech = [&](Capability c) {
      auto it = r.mechanisms.find(c);
      return it == r.mechanisms.end() ? std::string() : it->second;
    };
    CgroupLimits limits;
    // The tree needs a group of its own only when a cgroup holds it (not
    // when the pid namespace does).
    limits.tree = CgroupBacked(mech(Capability::kProcessTree));
    if (CgroupBacked(mech(Capability::kMemory))) limits.memory_bytes = spec.limits.memory_bytes;
    if (CgroupBacked(mech(Capability::kProcessCount))) limits.pids = spec.limits.pids;
    if (CgroupBacked(mech(Capability::kCpu))) limits.cpu = spec.limits.cpu;
    // Where its groups go (an error where the plan has no parent for one),
    // recorded before they exist.
    auto paths = GrantCgroups::Paths(probe.cgroups, grant.id, limits);
    std::optional<sys::Error> failed;
    if (!paths) {
      failed = paths.error();
    } else {
      if (auto inserted = store.InsertGrant(RecordOf(grant, spec, *paths, *self)); !inserted) {
        return internal("cannot record the grant in " + store.path() + ": " +
                        inserted.error().message());
      }
      if (paths->empty()) return grant;
      auto cgroups = GrantCgroups::Create(probe.cgroups, grant.id, limits);
      if (cgroups) {
        grant.cgroups = std::move(*cgroups);
        return grant;
      }
      failed = cgroups.error();
      // None of its groups is left (Create removes what it made): the
      // record goes too, and the next attempt records what it resolves.
      if (auto forgotten = store.DeleteGrant(grant.id); !forgotten) {
        return internal("cannot forget the grant " + grant.id +
                        " whose cgroups failed: " + forgotten.error().message());
      }
    }
    if (attempt == 1) return internal("cannot set up the grant's cgroups: " + failed->message());
    std::string why = "setting up the grant's cgroup failed: " + failed->message();
    for (Capability c : r.enforced) {
      if (CgroupBacked(mech(c))) broken[c] = why;
    }
  }
}

}  // namespace cordon::contain
