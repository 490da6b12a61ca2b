#include "contain/cgroup_leaf.h"

#include <set>
#include <vector>

namespace cordon::contain {
namespace {

const std::set<std::string> kLimitControllers = {"cpu", "memory", "pids"};

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find_first_of(" \n", pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) words.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return words;
}

}  // namespace

LeafMove MoveIntoLeaf(const CgroupLayout& layout, pid_t self, const CgroupHost& host) {
  LeafMove out;
  if (!layout.v2 || layout.v2->own_dir.empty()) {
    out.note = "no cgroup v2 group of this process is reachable: not moved";
    return out;
  }
  for (const auto& c : kLimitControllers) {
    if (layout.v1.contains(c)) {
      out.note = "cgroup v1 holds " + c + " here (a hybrid host): not moved";
      return out;
    }
  }
  const Hierarchy& h = *layout.v2;
  bool tree_has_limits = false;
  if (auto text = host.Read(h.mount_point + "/cgroup.controllers")) {
    for (const auto& c : Words(*text)) tree_has_limits |= kLimitControllers.contains(c);
  }
  if (!tree_has_limits) {
    out.note = "the cgroup v2 tree has no cpu, memory or pids controller: not moved";
    return out;
  }
  // Only the true root lacks cgroup.type: a cgroup namespace's root (a
  // container's "/") is an ordinary group that the rule applies to.
  if (!host.Exists(h.own_dir + "/cgroup.type")) {
    out.note =
        "this process runs in the root group, which may hold processes and still hand "
        "controllers down: not moved";
    return out;
  }
  out.needed = true;
  auto procs = host.Read(h.own_dir + "/cgroup.procs");
  if (!procs) {
    out.note =
        "cannot read " + h.own_dir + "/cgroup.procs: " + procs.error().message() + ": not moved";
    return out;
  }
  std::vector<std::string> members = Words(*procs);
  const std::string me = std::to_string(self);
  if (members.size() != 1 || members[0] != me) {
    out.note = "the group " + h.own_dir + " holds " + std::to_string(members.size()) +
               " processes besides or instead of this one: moving this one alone would not "
               "free it to hand controllers down; not moved (start cordon serve in a group of "
               "its own, e.g. a systemd service with Delegate=yes)";
    return out;
  }
  const std::string leaf = h.own_dir + "/" + kSupervisorLeaf;
  if (auto made = host.MakeDirs(leaf); !made) {
    out.note = "cannot create the leaf " + leaf + ": " + made.error().message() + ": not moved";
    return out;
  }
  if (auto wrote = host.Write(leaf + "/cgroup.procs", me); !wrote) {
    out.note = "cannot move into the leaf " + leaf + ": " + wrote.error().message() +
               ": not moved (is " + h.own_dir + " delegated to this user?)";
    return out;
  }
  out.moved = true;
  out.leaf = leaf;
  // PlanOptions::cgroup_root is joined with the mount point.
  out.cgroup_root = h.own_dir.substr(h.mount_point.size()) + "/cordon";
  out.note = "moved into " + leaf + " so that " + h.own_dir +
             " holds no process and can hand controllers to the sandboxes' groups under " +
             h.mount_point + *out.cgroup_root + " (cgroup v2 'no internal processes' rule)";
  return out;
}

}  // namespace cordon::contain
