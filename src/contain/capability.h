// The enforceable properties of a run (DESIGN.md §2, "Capabilities").
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace cordon::contain {

enum class Capability {
  kProcessTree,    // every descendant is torn down, setsid'ed ones too
  kWallClock,      // the run is stopped at a deadline
  kOutputCap,      // captured output is bounded
  kProcessCount,   // at most N processes/threads
  kMemory,         // at most N bytes of memory, OOM reported
  kAddressSpace,   // RLIMIT_AS
  kCpuTime,        // RLIMIT_CPU
  kFileSize,       // RLIMIT_FSIZE
  kOpenFiles,      // RLIMIT_NOFILE
  kCpu,            // at most N CPUs of time (a cgroup quota)
  kDisk,           // bytes and inodes of the workspace
  kFilesystem,     // only declared paths are visible/writable
  kNetwork,        // no network except a private loopback
  kProcessView,    // host processes are invisible and unsignallable
  kSyscallFilter,  // dangerous syscalls are refused
  kPrivileges,     // no privilege can be gained
};

inline constexpr std::array kAllCapabilities = {
    Capability::kProcessTree,  Capability::kWallClock,   Capability::kOutputCap,
    Capability::kProcessCount, Capability::kMemory,      Capability::kAddressSpace,
    Capability::kCpuTime,      Capability::kFileSize,    Capability::kOpenFiles,
    Capability::kCpu,          Capability::kDisk,        Capability::kFilesystem,
    Capability::kNetwork,      Capability::kProcessView, Capability::kSyscallFilter,
    Capability::kPrivileges,
};

// The capabilities that isolation (namespaces, seccomp, Landlock) provides.
inline constexpr std::array kIsolationCapabilities = {
    Capability::kFilesystem,    Capability::kNetwork,    Capability::kProcessView,
    Capability::kSyscallFilter, Capability::kPrivileges,
};

// "process_tree", "wall_clock", ...
std::string_view CapabilityName(Capability c);
std::optional<Capability> ParseCapability(std::string_view name);

}  // namespace cordon::contain
