#include "contain/spec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "contain/seccomp.h"

namespace cordon::contain {
namespace {

// The kernel's own ceiling for RLIMIT_NOFILE is /proc/sys/fs/nr_open
// (1048576 by default); asking for more can only fail later, in the child.
constexpr int64_t kMaxOpenFiles = 1 << 20;
// PID_MAX_LIMIT on 64-bit Linux: no host has more pids, and pids.max
// refuses a larger number (EINVAL).
constexpr int64_t kMaxPids = 4 * 1024 * 1024;
// Beyond it tmpfs refuses nr_inodes on some kernels, and ext4 has no more.
constexpr int64_t kMaxDiskInodes = int64_t{1} << 32;
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

std::string AtMostAYear(int64_t ms) {
  return "must be at most a year (" + std::to_string(kMaxDurationMs) + " ms), got " +
         std::to_string(ms) + " ms";
}

// An absolute path without empty, "." or ".." segments, as every path that
// becomes a mount point or a Landlock rule must be: "/a/../etc" would name
// something other than what a reader of the policy sees.
std::optional<std::string> PathProblem(const std::string& path) {
  if (path.empty()) return "the path is empty";
  if (HasNul(path)) return "the path contains a NUL byte";
  if (path[0] != '/') return "'" + path + "' is not an absolute path";
  if (path == "/") return std::nullopt;
  if (path.back() == '/') return "'" + path + "' ends with '/'";
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view segment(path.data() + start, end - start);
    if (segment.empty() || segment == "." || segment == "..") {
      return "'" + path + "' has an empty, '.' or '..' segment";
    }
    start = end + 1;
  }
  return std::nullopt;
}

bool Beneath(const std::string& path, const std::string& dir) {
  return path == dir || path.starts_with(dir + "/");
}

std::optional<SpecError> ValidateIsolation(const IsolationSpec& iso) {
  if (!iso.enabled()) {
    if (!iso.binds.empty()) {
      return SpecError{"binds", "binds need isolation (standard or strict), not none"};
    }
    return std::nullopt;
  }
  std::set<std::string> targets;
  for (const Bind& b : iso.binds) {
    if (auto p = PathProblem(b.source)) return SpecError{"binds", "source: " + *p};
    if (auto p = PathProblem(b.target)) return SpecError{"binds", "target: " + *p};
    struct stat st {};
    if (::stat(b.source.c_str(), &st) != 0) {
      return SpecError{"binds", b.source + ": " + std::strerror(errno)};
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      return SpecError{"binds", b.source + " is neither a directory nor a regular file"};
    }
    // The view's own parts are not to be covered: the root, /proc, /dev
    // and the workspace are what the sandbox is built on.
    for (const char* reserved : {"/proc", "/dev"}) {
      if (Beneath(b.target, reserved)) {
        return SpecError{"binds", "target " + b.target + " is beneath " + reserved};
      }
    }
    if (b.target == "/" || b.target == "/workspace") {
      return SpecError{"binds", "target " + b.target + " is reserved"};
    }
    if (!targets.insert(b.target).second) {
      return SpecError{"binds", "target " + b.target + " is given twice"};
    }
  }
  if (iso.tmp_size_bytes <= 0) {
    return SpecError{"tmp_size_bytes",
                     "must be a positive number, got " + std::to_string(iso.tmp_size_bytes)};
  }
  const IdRange& r = iso.id_range;
  uint64_t end = uint64_t{r.first} + r.count;
  if (r.first == 0 || r.count == 0 || end > 0xffffffffu) {
    return SpecError{"uid_range", "must be a non-empty range of ids between 1 and 4294967294"};
  }
  if (r.first <= 65534 && 65534 < end) {
    return SpecError{"uid_range", "must not contain 65534 (nobody): a sandbox is nobody else"};
  }
  for (const auto& dir : iso.system_dirs) {
    if (auto p = PathProblem(dir)) return SpecError{"system_dirs", *p};
    if (dir == "/") return SpecError{"system_dirs", "'/' would show the whole host"};
  }
  for (const auto& path : iso.hidden_paths) {
    if (auto p = PathProblem(path)) return SpecError{"hidden_paths", *p};
  }
  for (const auto& name : iso.seccomp_deny) {
    if (!KnownSyscall(name)) return SpecError{"seccomp.deny", "unknown system call '" + name + "'"};
  }
  return std::nullopt;
}

}  // namespace

std::optional<SpecError> ValidateLimits(const Limits& l) {
  if (auto e = ValidateTimeoutMs("limits.timeout_ms", l.timeout_ms)) return e;
  if (l.grace_ms < 0) {
    return SpecError{"limits.grace_ms", "must not be negative, got " + std::to_string(l.grace_ms)};
  }
  if (l.grace_ms > kMaxDurationMs) return SpecError{"limits.grace_ms", AtMostAYear(l.grace_ms)};
  if (l.output_limit_bytes <= 0) {
    return SpecError{"limits.output_limit_bytes",
                     "must be a positive number, got " + std::to_string(l.output_limit_bytes)};
  }
  if (l.output_limit_bytes > kMaxOutputLimit) {
    return SpecError{"limits.output_limit_bytes", "must be at most 1 GiB per stream"};
  }
  if (auto e = Positive("limits.memory_bytes", l.memory_bytes)) return e;
  if (auto e = Positive("limits.pids", l.pids)) return e;
  if (l.pids && *l.pids > kMaxPids) {
    return SpecError{"limits.pids",
                     "must be at most " + std::to_string(kMaxPids) + " (the most pids Linux has)"};
  }
  if (auto e = Positive("limits.cpu_seconds", l.cpu_seconds)) return e;
  if (auto e = Positive("limits.file_size_bytes", l.file_size_bytes)) return e;
  if (auto e = Positive("limits.open_files", l.open_files)) return e;
  if (l.open_files && *l.open_files > kMaxOpenFiles) {
    return SpecError{"limits.open_files", "must be at most " + std::to_string(kMaxOpenFiles)};
  }
  if (auto e = Positive("limits.address_space_bytes", l.address_space_bytes)) return e;
  if (l.cpu && !(*l.cpu >= kMinCpus && *l.cpu <= kMaxCpus)) {
    return SpecError{"limits.cpu",
                     "must be a number of CPUs at least 0.01 (the kernel's smallest quota, 1 ms "
                     "of each 100 ms) and at most " +
                         std::to_string(static_cast<int>(kMaxCpus))};
  }
  if (auto e = Positive("limits.disk_bytes", l.disk_bytes)) return e;
  if (auto e = Positive("limits.disk_inodes", l.disk_inodes)) return e;
  if (l.disk_inodes && *l.disk_inodes > kMaxDiskInodes) {
    return SpecError{"limits.disk_inodes", "must be at most " + std::to_string(kMaxDiskInodes) +
                                               " (the most inodes an ext4 filesystem has)"};
  }
  return std::nullopt;
}

std::optional<SpecError> ValidateTimeoutMs(const std::string& field, std::optional<int64_t> ms) {
  if (auto e = Positive(field, ms)) return e;
  if (ms && *ms > kMaxDurationMs) return SpecError{field, AtMostAYear(*ms)};
  return std::nullopt;
}

std::string_view IsolationName(Isolation i) {
  switch (i) {
    case Isolation::kNone:
      return "none";
    case Isolation::kStandard:
      return "standard";
    case Isolation::kStrict:
      return "strict";
  }
  return "unknown";
}

std::optional<Isolation> ParseIsolation(std::string_view name) {
  for (Isolation i : {Isolation::kNone, Isolation::kStandard, Isolation::kStrict}) {
    if (IsolationName(i) == name) return i;
  }
  return std::nullopt;
}

std::string_view NetworkName(Network n) { return n == Network::kNone ? "none" : "host"; }

std::optional<Network> ParseNetwork(std::string_view name) {
  if (name == "none") return Network::kNone;
  if (name == "host") return Network::kHost;
  return std::nullopt;
}

const std::vector<std::string>& DefaultSystemDirs() {
  // What programs need to run: binaries, libraries, their data and /etc.
  // Missing ones are skipped; symlinks (a merged /usr) are recreated.
  static const std::vector<std::string> dirs = {"/usr",   "/bin",   "/sbin",   "/lib",
                                                "/lib32", "/lib64", "/libx32", "/etc"};
  return dirs;
}

const std::vector<std::string>& DefaultHiddenPaths() {
  // Secrets beneath the system directories: password hashes, host keys,
  // sudo rules, TLS private keys. Covered by an empty, unreadable mount.
  static const std::vector<std::string> paths = {
      "/etc/shadow",    "/etc/shadow-",     "/etc/gshadow",
      "/etc/gshadow-",  "/etc/ssh",         "/etc/sudoers",
      "/etc/sudoers.d", "/etc/ssl/private", "/etc/security/opasswd",
      "/etc/cordon",    "/etc/krb5.keytab",
  };
  return paths;
}

std::vector<std::string> Spec::Command() const {
  if (shell) return {"/bin/sh", "-c", *shell};
  return argv;
}

namespace {

// `path` names / itself, or through links (a link to / given as the
// workspace would show the whole host too).
bool IsHostRoot(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::weakly_canonical(path, ec);
  return path.lexically_normal() == "/" || (!ec && resolved == "/");
}

}  // namespace

std::optional<SpecError> Validate(const Spec& spec) {
  if (auto e = ValidateCommand(spec)) return e;
  if (auto e = ValidateEnv(spec)) return e;
  if (auto e = ValidateWorkspace(spec)) return e;
  if (auto e = ValidateLimits(spec.limits)) return e;
  if (auto e = ValidateIsolation(spec.isolation)) return e;
  // The workspace is shown read-write: the host's root there would undo
  // the whole filesystem view.
  if (spec.isolation.enabled() && spec.workspace && IsHostRoot(*spec.workspace)) {
    return SpecError{"workspace", "/ would show the whole host inside the sandbox, writable"};
  }
  // The sandbox's init (pid 1 of its namespace) is one of the pids: with
  // one, the command could never be started (EAGAIN).
  if (spec.isolation.enabled() && spec.limits.pids && *spec.limits.pids < 2) {
    return SpecError{"limits.pids",
                     "must be at least 2 with isolation: the sandbox's init is one of them"};
  }
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
  if (l.cpu) caps.insert(Capability::kCpu);
  if (l.disk_bytes || l.disk_inodes) caps.insert(Capability::kDisk);
  for (Capability c : spec.defaulted) caps.erase(c);
  return caps;
}

std::set<Capability> Wanted(const Spec& spec) {
  std::set<Capability> caps = Explicit(spec);
  caps.insert(spec.defaulted.begin(), spec.defaulted.end());
  caps.insert(Capability::kProcessTree);
  caps.insert(Capability::kOutputCap);
  if (spec.isolation.enabled()) {
    for (Capability c : kIsolationCapabilities) {
      // --network host gives the network up on purpose: not wanted.
      if (c == Capability::kNetwork && spec.isolation.network == Network::kHost) continue;
      caps.insert(c);
    }
  }
  return caps;
}

std::string NotWantedReason(const Spec& spec, Capability c) {
  if (std::ranges::find(kIsolationCapabilities, c) != kIsolationCapabilities.end()) {
    if (!spec.isolation.enabled()) return "isolation none does not provide it";
    return "network host shares the host's network";
  }
  // The request field and the CLI option of each limit's capability.
  static constexpr std::pair<Capability, std::string_view> kLimits[] = {
      {Capability::kWallClock, "limits.timeout_ms (cordon run --timeout)"},
      {Capability::kProcessCount, "limits.pids (--pids)"},
      {Capability::kMemory, "limits.memory_bytes (--memory)"},
      {Capability::kAddressSpace, "limits.address_space_bytes (--address-space)"},
      {Capability::kCpuTime, "limits.cpu_seconds (--cpu-seconds)"},
      {Capability::kFileSize, "limits.file_size_bytes (--file-size)"},
      {Capability::kOpenFiles, "limits.open_files (--open-files)"},
      {Capability::kCpu, "limits.cpu (--cpus)"},
      {Capability::kDisk, "limits.disk_bytes or limits.disk_inodes"},
  };
  auto limit = std::ranges::find(kLimits, c, &std::pair<Capability, std::string_view>::first);
  if (limit == std::end(kLimits)) return "nothing asks for it";
  return "no limit asks for it: set " + std::string(limit->second);
}

}  // namespace cordon::contain
