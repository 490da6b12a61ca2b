// What the caller asks for, and the rules every front door validates it by.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contain/capability.h"

namespace cordon::contain {

// Limits use signed integers so that a negative value from any front door
// (CLI, JSON) reaches Validate and gets a clear error instead of wrapping.
// Field names match the JSON API.
struct Limits {
  std::optional<int64_t> timeout_ms;      // wall clock; none: no deadline
  int64_t grace_ms = 2000;                // SIGTERM -> SIGKILL
  int64_t output_limit_bytes = 10 << 20;  // per stream
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> pids;
  std::optional<int64_t> cpu_seconds;
  std::optional<int64_t> file_size_bytes;
  std::optional<int64_t> open_files;
  std::optional<int64_t> address_space_bytes;
  std::optional<double> cpu;           // CPUs of time (0.5: half of one), a cgroup quota
  std::optional<int64_t> disk_bytes;   // the workspace's bytes
  std::optional<int64_t> disk_inodes;  // the workspace's files and directories
};

// The largest `limits.cpu`: more CPUs than any host has.
inline constexpr double kMaxCpus = 4096;
// The smallest: the kernel's smallest quota, 1 ms of each 100 ms period.
// Less would be enforced as this, a claim about another limit.
inline constexpr double kMinCpus = 0.01;
// The longest timeout or grace: a year. Longer is a mistake, and a year in
// nanoseconds still fits beside any steady_clock time point (INT64_MAX
// milliseconds made the deadline overflow and pass at once).
inline constexpr int64_t kMaxDurationMs = int64_t{365} * 24 * 3600 * 1000;

// How much of the host a run sees (README "Isolation").
enum class Isolation {
  kNone,      // the foundation's boundary only: cgroup, limits, verified teardown
  kStandard,  // namespaces, a built filesystem view, seccomp, Landlock, no privileges
  kStrict,    // standard, and seccomp also refuses raw sockets and unusual socket families
};
enum class Network {
  kNone,  // a network namespace with only `lo` up
  kHost,  // the host's network: loud and explicit (--network host), never a default
};

std::string_view IsolationName(Isolation i);
std::optional<Isolation> ParseIsolation(std::string_view name);
std::string_view NetworkName(Network n);
std::optional<Network> ParseNetwork(std::string_view name);

// A host path shown inside the sandbox at `target` (--ro-bind, --bind).
struct Bind {
  std::string source;
  std::string target;
  bool writable = false;
  bool operator==(const Bind&) const = default;
};

// The outside ids a root supervisor hands out, one per sandbox: [first, first + count).
struct IdRange {
  uint32_t first = 0;
  uint32_t count = 0;
  bool operator==(const IdRange&) const = default;
};
inline constexpr IdRange kDefaultIdRange{1000000000, 65536};

// The system directories shown read-only, and the paths beneath them that
// stay hidden (secrets), unless a policy names others.
const std::vector<std::string>& DefaultSystemDirs();
const std::vector<std::string>& DefaultHiddenPaths();

struct IsolationSpec {
  Isolation level = Isolation::kStandard;
  Network network = Network::kNone;
  std::vector<Bind> binds;
  int64_t tmp_size_bytes = int64_t{256} << 20;  // the private /tmp
  IdRange id_range = kDefaultIdRange;
  std::vector<std::string> system_dirs = DefaultSystemDirs();
  std::vector<std::string> hidden_paths = DefaultHiddenPaths();
  std::vector<std::string> seccomp_deny;  // syscall names refused on top of the table
  // cordon made the workspace (a session's, a daemon run's scratch), never a
  // caller's directory: where it cannot be idmapped, it is chowned to the
  // sandbox's outside id so that the sandbox can use it. Not an API field.
  bool workspace_made = false;
  // The workspace is a tmpfs of the sandbox's own, bounded by the disk
  // limits, mounted in its mount namespace and gone with it: nothing on the
  // host is made before or removed after (a daemon's warm run, where a run's
  // scratch would be a tmpfs anyway). Needs namespaces; `Spec::workspace`
  // stays unset. Not an API field.
  bool private_workspace = false;

  bool enabled() const { return level != Isolation::kNone; }
};

struct Spec {
  // Exactly one of `argv` (executed directly, PATH searched when argv[0] has
  // no '/') and `shell` (run as /bin/sh -c SHELL).
  std::vector<std::string> argv;
  std::optional<std::string> shell;
  // The working directory; unset: the caller's own.
  std::optional<std::filesystem::path> workspace;
  // Exactly the child's environment: nothing is inherited.
  std::vector<std::pair<std::string, std::string>> env;
  // Bytes for the child's stdin; unset: /dev/null.
  std::optional<std::string> stdin_bytes;
  Limits limits;
  IsolationSpec isolation;
  // Refused unless each of these is enforced.
  std::set<Capability> required;
  // Run with an unenforceable limit reported degraded, instead of refusing.
  bool permissive = false;
  // The capabilities whose limit is the daemon's default, not the caller's
  // (contain/bounds.h): where the host cannot enforce one it is degraded,
  // never refused.
  std::set<Capability> defaulted;
  std::string owner;

  // The argv that is executed: `argv`, or {"/bin/sh", "-c", shell}.
  std::vector<std::string> Command() const;
};

// A validation failure: the field (JSON name, e.g. "limits.memory_bytes") and why.
struct SpecError {
  std::string field;
  std::string reason;
  std::string message() const { return field + ": " + reason; }
};

// A timeout in milliseconds, where given: positive and at most
// kMaxDurationMs. For limits.timeout_ms and a session execution's timeout.
std::optional<SpecError> ValidateTimeoutMs(const std::string& field, std::optional<int64_t> ms);

// Each limit within its own range (Validate checks a whole spec).
std::optional<SpecError> ValidateLimits(const Limits& limits);

// Checks every field; the first failure is returned. Touches nothing but
// stat(2) of the workspace and of bind sources.
std::optional<SpecError> Validate(const Spec& spec);

// The capabilities a spec sets up: its limits and isolation, whether or
// not it requires them.
std::set<Capability> Wanted(const Spec& spec);

// Why a capability that `required` names is not in Wanted(spec): no limit
// asks for it, or no isolation provides it. Requiring it refuses the run.
std::string NotWantedReason(const Spec& spec, Capability c);

// The capabilities that an explicit limit asks for: unless the spec is
// permissive, they are refused rather than silently dropped.
std::set<Capability> Explicit(const Spec& spec);

}  // namespace cordon::contain
