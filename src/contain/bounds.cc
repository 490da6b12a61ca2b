#include "contain/bounds.h"

#include <cstdio>
#include <utility>

namespace cordon::contain {
namespace {

std::string Number(int64_t v) { return std::to_string(v); }
std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// One bounded limit: its field, its options, where it sits in a request and
// in the bounds.
template <typename T>
struct Bounded {
  const char* field;
  const char* default_option;
  const char* max_option;
  std::optional<T> Limits::*limit;
  T Bounds::*default_value;
  std::optional<T> Bounds::*ceiling;
  Capability capability;
};

constexpr Bounded<int64_t> kIntegers[] = {
    {"limits.memory_bytes", "--default-memory", "--max-memory", &Limits::memory_bytes,
     &Bounds::memory_bytes, &Bounds::max_memory_bytes, Capability::kMemory},
    {"limits.pids", "--default-pids", "--max-pids", &Limits::pids, &Bounds::pids, &Bounds::max_pids,
     Capability::kProcessCount},
    {"limits.disk_bytes", "--default-disk", "--max-disk", &Limits::disk_bytes, &Bounds::disk_bytes,
     &Bounds::max_disk_bytes, Capability::kDisk},
    {"limits.disk_inodes", "--default-inodes", "--max-inodes", &Limits::disk_inodes,
     &Bounds::disk_inodes, &Bounds::max_disk_inodes, Capability::kDisk},
};
constexpr Bounded<double> kCpu = {"limits.cpu", "--default-cpu",  "--max-cpu",     &Limits::cpu,
                                  &Bounds::cpu, &Bounds::max_cpu, Capability::kCpu};

template <typename T>
std::optional<std::string> DefaultProblem(const Bounds& b, const Bounded<T>& f) {
  const auto& ceiling = b.*f.ceiling;
  if (!ceiling || b.*f.default_value <= *ceiling) return std::nullopt;
  return std::string(f.default_option) + " (" + Number(b.*f.default_value) + ") is above " +
         f.max_option + " (" + Number(*ceiling) + ")";
}

// A default or a ceiling outside the limit's own range (ValidateLimits)
// would refuse every request that takes it: named when the daemon starts.
template <typename T>
std::optional<std::string> RangeProblem(const Bounds& b, const Bounded<T>& f) {
  const std::pair<const char*, std::optional<T>> values[] = {{f.default_option, b.*f.default_value},
                                                             {f.max_option, b.*f.ceiling}};
  for (const auto& [option, value] : values) {
    if (!value) continue;
    Limits limits;
    limits.*f.limit = *value;
    if (auto e = ValidateLimits(limits)) return std::string(option) + ": " + e->reason;
  }
  return std::nullopt;
}

template <typename T>
std::optional<CeilingError> Check(const Bounds& b, const Bounded<T>& f, const Spec& spec) {
  const auto& asked = spec.limits.*f.limit;
  const auto& ceiling = b.*f.ceiling;
  if (!asked || !ceiling || *asked <= *ceiling) return std::nullopt;
  return CeilingError{f.field, std::string(f.field) + ": " + Number(*asked) +
                                   " is above this daemon's ceiling of " + Number(*ceiling) +
                                   " (cordon serve " + f.max_option + ")"};
}

template <typename T>
void Fill(const Bounds& b, const Bounded<T>& f, Spec& spec) {
  auto& limit = spec.limits.*f.limit;
  if (limit) return;
  limit = b.*f.default_value;
  spec.defaulted.insert(f.capability);
}

}  // namespace

std::optional<std::string> BoundsProblem(const Bounds& bounds) {
  for (const auto& f : kIntegers) {
    if (auto p = RangeProblem(bounds, f)) return p;
    if (auto p = DefaultProblem(bounds, f)) return p;
  }
  if (auto p = RangeProblem(bounds, kCpu)) return p;
  return DefaultProblem(bounds, kCpu);
}

std::optional<CeilingError> ApplyBounds(const Bounds& bounds, Spec& spec) {
  if (spec.isolation.level < bounds.min_isolation) {
    return CeilingError{"isolation",
                        "isolation: " + std::string(IsolationName(spec.isolation.level)) +
                            " is below this daemon's floor of " +
                            std::string(IsolationName(bounds.min_isolation)) +
                            " (cordon serve --min-isolation)"};
  }
  if (spec.isolation.enabled() && spec.isolation.network == Network::kHost &&
      !bounds.allow_network_host) {
    return CeilingError{"isolation.network",
                        "isolation.network: host is not allowed by this daemon (cordon serve "
                        "--allow-network-host)"};
  }
  for (const auto& f : kIntegers) {
    if (auto e = Check(bounds, f, spec)) return e;
  }
  if (auto e = Check(bounds, kCpu, spec)) return e;
  // disk_bytes and disk_inodes share one capability: it is the caller's
  // (refused where it cannot be enforced) when either was asked for.
  bool disk_asked = spec.limits.disk_bytes || spec.limits.disk_inodes;
  for (const auto& f : kIntegers) Fill(bounds, f, spec);
  Fill(bounds, kCpu, spec);
  if (disk_asked) spec.defaulted.erase(Capability::kDisk);
  return std::nullopt;
}

}  // namespace cordon::contain
