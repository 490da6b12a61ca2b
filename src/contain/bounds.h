// The operator's bounds on a daemon's tenants (DESIGN.md §5, "Bounds"):
// the limits every run and session gets when its request declares none,
// and the ceilings no request may go above. The CLI has none: it applies
// only what it is asked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "contain/spec.h"

namespace cordon::contain {

struct Bounds {
  // A request that leaves one of these unset gets it. A default the host
  // cannot enforce is degraded, never refused (Spec::defaulted).
  int64_t memory_bytes = int64_t{1} << 30;
  int64_t pids = 512;
  double cpu = 1.0;
  int64_t disk_bytes = int64_t{10} << 30;
  int64_t disk_inodes = 1 << 20;
  // The most a request may ask for; unset: no ceiling.
  std::optional<int64_t> max_memory_bytes;
  std::optional<int64_t> max_pids;
  std::optional<double> max_cpu;
  std::optional<int64_t> max_disk_bytes;
  std::optional<int64_t> max_disk_inodes;
  // The least isolation a request may ask for (--min-isolation): a caller
  // (an agent's MCP client, a leaked token) that could ask for `none` would
  // run as the daemon's own user on the host.
  Isolation min_isolation = Isolation::kStandard;
  // Whether a request may share the host's network (--allow-network-host):
  // its loopback services and whatever the host reaches (a cloud's metadata
  // endpoint and the credentials there) are the operator's to give.
  bool allow_network_host = false;
};

// A default above its own ceiling, named by its `cordon serve` options.
std::optional<std::string> BoundsProblem(const Bounds& bounds);

// A limit above the operator's ceiling, an isolation below its floor, the
// host's network where it is not allowed: the field (limits.memory_bytes,
// isolation, isolation.network) and the bound, for a 422.
struct CeilingError {
  std::string field;
  std::string message;
};

// Refuses an isolation below the floor, the host's network unless allowed
// and a limit of `spec` above its ceiling, then fills every one left
// unset with the default and marks it in `spec.defaulted`. Changes nothing
// when it refuses.
std::optional<CeilingError> ApplyBounds(const Bounds& bounds, Spec& spec);

}  // namespace cordon::contain
