#include "contain/spec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cordon::contain {
namespace {

// The kernel's own ceiling for RLIMIT_NOFILE is /proc/sys/fs/nr_open
// (1048576 by default); asking for more can only fail later, in the child.
constexpr int64_t kMaxOpenFiles = 1 << 20;
constexpr int64_t kMaxOutputLimit = int64_t{1} << 30;
constexpr size_t kMaxOwner = 256;

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

std::optional<SpecError> Positive(const std::string& field, const std::optional<int64_t>& v) {
  if (v && *v <= 0) {
    return SpecError{field, "must be a positive number, got " + std::to_string(*v)};
  }
  return std::nullopt;
}

std::optional<SpecError> ValidateCommand(const Spec& spec) {
  if (spec.shell && !spec.argv.empty()) {
    return SpecError{"argv", "give either argv or shell, not both"};
  }
  if (spec.shell) {
    if (spec.shell->empty()) return SpecError{"shell", "the shell command is empty"};
    if (HasNul(*spec.shell)) return SpecError{"shell", "contains a NUL byte"};
    return std::nullopt;
  }
  if (spec.argv.empty()) return SpecError{"argv", "no command given (empty argv)"};
  if (spec.argv[0].empty()) return SpecError{"argv", "the program name (argv[0]) is empty"};
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    // A NUL would silently cut the argument short at execve.
    if (HasNul(spec.argv[i])) {
      return SpecError{"argv", "argument " + std::to_string(i) + " contains a NUL byte"};
    }
  }
  return std::nullopt;
}

std::optional<SpecError> ValidateEnv(const Spec& spec) {
  std::set<std::string> seen;
  for (const auto& [name, value] : spec.env) {
    if (name.empty()) return SpecError{"env", "a variable has an empty name"};
    if (name.find('=') != std::string::npos) {
      return SpecError{"env", "variable name \"" + name + "\" contains '='"};
    }
    if (HasNul(name)) return SpecError{"env", "a variable name contains a NUL byte"};
    if (HasNul(value)) return SpecError{"env", "the value of " + name + " contains a NUL byte"};
    if (!seen.insert(name).second) return SpecError{"env", "variable " + name + " is given twice"};
  }
  return std::nullopt;
}

std::optional<SpecError> ValidateWorkspace(const Spec& spec) {
  if (!spec.workspace) return std::nullopt;
  const std::string path = spec.workspace->string();
  if (path.empty()) return SpecError{"workspace", "the path is empty"};
  if (HasNul(path)) return SpecError{"workspace", "the path contains a NUL byte"};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return SpecError{"workspace", path + ": " + std::strerror(errno)};
  }
  if (!S_ISDIR(st.st_mode)) return SpecError{"workspace", path + " is not a directory"};
  if (::access(path.c_str(), X_OK) != 0) {
    return SpecError{"workspace", path + " cannot be entered: " + std::strerror(errno)};
  }
  return std::nullopt;
}

std::optional<SpecError> ValidateLimits(const Limits& l) {
  if (auto e = Positive("limits.timeout_ms", l.timeout_ms)) return e;
  if (l.grace_ms < 0) {
    return SpecError{"limits.grace_ms", "must not be negative, got " + std::to_string(l.grace_ms)};
  }
  if (l.output_limit_bytes <= 0) {
    return SpecError{"limits.output_limit_bytes",
                     "must be a positive number, got " + std::to_string(l.output_limit_bytes)};
  }
  if (l.output_limit_bytes > kMaxOutputLimit) {
    return SpecError{"limits.output_limit_bytes", "must be at most 1 GiB per stream"};
  }
  if (auto e = Positive("limits.memory_bytes", l.memory_bytes)) return e;
  if (auto e = Positive("limits.pids", l.pids)) return e;
  if (auto e = Positive("limits.cpu_seconds", l.cpu_seconds)) return e;
  if (auto e = Positive("limits.file_size_bytes", l.file_size_bytes)) return e;
  if (auto e = Positive("limits.open_files", l.open_files)) return e;
  if (l.open_files && *l.open_files > kMaxOpenFiles) {
    return SpecError{"limits.open_files", "must be at most " + std::to_string(kMaxOpenFiles)};
  }
  if (auto e = Positive("limits.address_space_bytes", l.address_space_bytes)) return e;
  return std::nullopt;
}

}  // namespace

std::vector<std::string> Spec::Command() const {
  if (shell) return {"/bin/sh", "-c", *shell};
  return argv;
}

std::optional<SpecError> Validate(const Spec& spec) {
  if (auto e = ValidateCommand(spec)) return e;
  if (auto e = ValidateEnv(spec)) return e;
  if (auto e = ValidateWorkspace(spec)) return e;
  if (auto e = ValidateLimits(spec.limits)) return e;
  if (spec.owner.size() > kMaxOwner) {
    return SpecError{"owner", "longer than " + std::to_string(kMaxOwner) + " bytes"};
  }
  for (char c : spec.owner) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return SpecError{"owner", "contains a control character"};
    }
  }
  return std::nullopt;
}

std::set<Capability> Explicit(const Spec& spec) {
  std::set<Capability> caps;
  const Limits& l = spec.limits;
  if (l.memory_bytes) caps.insert(Capability::kMemory);
  if (l.pids) caps.insert(Capability::kProcessCount);
  if (l.cpu_seconds) caps.insert(Capability::kCpuTime);
  if (l.file_size_bytes) caps.insert(Capability::kFileSize);
  if (l.open_files) caps.insert(Capability::kOpenFiles);
  if (l.address_space_bytes) caps.insert(Capability::kAddressSpace);
  if (l.timeout_ms) caps.insert(Capability::kWallClock);
  return caps;
}

std::set<Capability> Wanted(const Spec& spec) {
  std::set<Capability> caps = Explicit(spec);
  caps.insert(Capability::kProcessTree);
  caps.insert(Capability::kOutputCap);
  caps.insert(spec.required.begin(), spec.required.end());
  return caps;
}

}  // namespace cordon::contain
