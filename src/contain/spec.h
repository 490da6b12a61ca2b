// What the caller asks for, and the rules every front door validates it by.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
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
  // Refused unless each of these is enforced.
  std::set<Capability> required;
  // Run with an unenforceable limit reported degraded, instead of refusing.
  bool permissive = false;
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

// Checks every field; the first failure is returned. Touches nothing but
// stat(2) of the workspace.
std::optional<SpecError> Validate(const Spec& spec);

// The capabilities a spec asks for, whether or not it requires them.
std::set<Capability> Wanted(const Spec& spec);

// The capabilities that an explicit limit asks for: unless the spec is
// permissive, they are refused rather than silently dropped.
std::set<Capability> Explicit(const Spec& spec);

}  // namespace cordon::contain
