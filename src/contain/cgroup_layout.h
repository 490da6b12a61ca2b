// Where the cgroup hierarchies are and where this process sits in each, from
// /proc/self/mountinfo and /proc/self/cgroup. Handles a pure cgroup v2 host,
// a hybrid host (v1 controllers plus a controller-less v2 mount, as on this
// project's CI machines) and a v1-only host.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "sys/error.h"

namespace cordon::contain {

struct Hierarchy {
  int version = 2;                    // 1 or 2
  std::set<std::string> controllers;  // v1: from the mount options; v2: unknown here
  std::string mount_point;            // "/sys/fs/cgroup/memory"
  std::string own_path;               // this process's group, as in /proc/self/cgroup
  std::string own_dir;                // mount_point joined with own_path ("" if unreachable)
};

struct CgroupLayout {
  std::optional<Hierarchy> v2;
  std::map<std::string, Hierarchy> v1;  // by controller ("memory", "pids", ...)
};

// Pure: parses the two files' text. Mount points with escaped characters
// (\040 for a space) are decoded.
CgroupLayout ParseCgroupLayout(std::string_view mountinfo, std::string_view proc_self_cgroup);

// Reads /proc/self/mountinfo and /proc/self/cgroup.
sys::Result<CgroupLayout> DiscoverCgroupLayout();

}  // namespace cordon::contain
