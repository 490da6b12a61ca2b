#include "contain/cgroup_layout.h"

#include <vector>

#include "sys/fd.h"

namespace cordon::contain {
namespace {

const std::set<std::string> kV1Controllers = {
    "blkio",  "cpu",     "cpuacct",  "cpuset",     "devices", "freezer", "hugetlb",
    "memory", "net_cls", "net_prio", "perf_event", "pids",    "rdma",    "misc",
};

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct Mount {
  std::string root;
  std::string point;
  std::string fstype;
  std::set<std::string> controllers;
};

std::vector<Mount> CgroupMounts(std::string_view mountinfo) {
  std::vector<Mount> mounts;
  for (std::string_view line : Split(mountinfo, '\n')) {
    size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    auto left = Split(line.substr(0, dash), ' ');
    auto right = Split(line.substr(dash + 3), ' ');
    if (left.size() < 6 || right.size() < 3) continue;
    Mount m{Unescape(left[3]), Unescape(left[4]), std::string(right[0]), {}};
    if (m.fstype != "cgroup" && m.fstype != "cgroup2") continue;
    if (m.fstype == "cgroup") {
      for (std::string_view opt : Split(right[2], ',')) {
        if (kV1Controllers.contains(std::string(opt))) m.controllers.insert(std::string(opt));
      }
      if (m.controllers.empty()) continue;  // a named hierarchy (name=systemd): no controllers
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

// The directory of `own_path` beneath a mount whose root is `root`; "" when
// the group lies outside what is mounted there.
std::string OwnDir(const Mount& m, const std::string& own_path) {
  std::string rel;
  if (m.root == "/") {
    rel = own_path;
  } else if (own_path == m.root || own_path.starts_with(m.root + "/")) {
    rel = own_path.substr(m.root.size());
  } else {
    return "";
  }
  // Outside our cgroup namespace's root the kernel shows "/../..".
  if (rel.find("/..") != std::string::npos) return "";
  if (rel == "/") rel.clear();
  return m.point + rel;
}

}  // namespace

CgroupLayout ParseCgroupLayout(std::string_view mountinfo, std::string_view proc_self_cgroup) {
  // controller set (joined) -> own path, from /proc/self/cgroup.
  std::optional<std::string> v2_path;
  std::map<std::set<std::string>, std::string> v1_paths;
  for (std::string_view line : Split(proc_self_cgroup, '\n')) {
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view id = line.substr(0, c1);
    std::string_view list = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path(line.substr(c2 + 1));
    if (id == "0" && list.empty()) {
      v2_path = path;
      continue;
    }
    std::set<std::string> controllers;
    for (std::string_view c : Split(list, ',')) {
      if (kV1Controllers.contains(std::string(c))) controllers.insert(std::string(c));
    }
    if (!controllers.empty()) v1_paths[controllers] = path;
  }

  CgroupLayout layout;
  for (const Mount& m : CgroupMounts(mountinfo)) {
    if (m.fstype == "cgroup2") {
      if (layout.v2 || !v2_path) continue;  // the first mount of the hierarchy wins
      std::string dir = OwnDir(m, *v2_path);
      if (dir.empty()) continue;
      layout.v2 = Hierarchy{2, {}, m.point, *v2_path, dir};
      continue;
    }
    auto path = v1_paths.find(m.controllers);
    if (path == v1_paths.end()) continue;
    std::string dir = OwnDir(m, path->second);
    if (dir.empty()) continue;
    for (const std::string& c : m.controllers) {
      if (!layout.v1.contains(c))
        layout.v1[c] = Hierarchy{1, m.controllers, m.point, path->second, dir};
    }
  }
  return layout;
}

sys::Result<CgroupLayout> DiscoverCgroupLayout() {
  CORDON_ASSIGN_OR_RETURN(std::string mountinfo, sys::ReadFile("/proc/self/mountinfo", 4 << 20));
  CORDON_ASSIGN_OR_RETURN(std::string cgroup, sys::ReadFile("/proc/self/cgroup"));
  return ParseCgroupLayout(mountinfo, cgroup);
}

}  // namespace cordon::contain
