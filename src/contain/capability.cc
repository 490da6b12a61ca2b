#include "contain/capability.h"

namespace cordon::contain {

std::string_view CapabilityName(Capability c) {
  switch (c) {
    case Capability::kProcessTree:
      return "process_tree";
    case Capability::kWallClock:
      return "wall_clock";
    case Capability::kOutputCap:
      return "output_cap";
    case Capability::kProcessCount:
      return "process_count";
    case Capability::kMemory:
      return "memory";
    case Capability::kAddressSpace:
      return "address_space";
    case Capability::kCpuTime:
      return "cpu_time";
    case Capability::kFileSize:
      return "file_size";
    case Capability::kOpenFiles:
      return "open_files";
    case Capability::kCpu:
      return "cpu";
    case Capability::kDisk:
      return "disk";
    case Capability::kFilesystem:
      return "filesystem";
    case Capability::kNetwork:
      return "network";
    case Capability::kProcessView:
      return "process_view";
    case Capability::kSyscallFilter:
      return "syscall_filter";
    case Capability::kPrivileges:
      return "privileges";
  }
  return "unknown";
}

std::optional<Capability> ParseCapability(std::string_view name) {
  for (Capability c : kAllCapabilities) {
    if (CapabilityName(c) == name) return c;
  }
  return std::nullopt;
}

}  // namespace cordon::contain
