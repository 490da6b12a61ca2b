// The daemon's move into a leaf of its own group (DESIGN.md §5). On a pure
// cgroup v2 host a group that holds processes cannot hand controllers to
// child groups (the "no internal processes" rule; only the true root is
// exempt). A service manager that delegates a group (systemd's Delegate=yes
// on /system.slice/cordon.service, a container's cgroup namespace root)
// starts the daemon in that group's root, so the sandboxes' groups beneath
// it could get no memory, pids or cpu controller. The daemon therefore moves
// itself into <own group>/supervisor first, and its sandboxes' groups go
// under <own group>/cordon, a sibling, which can then be given controllers.
//
// Only `cordon serve` does this, once, before it plans its cgroups. A
// one-shot CLI never moves itself (its group is usually a shell's, shared
// with other processes); the plan's fallback covers it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "contain/cgroup_layout.h"
#include "contain/cgroup_plan.h"

namespace cordon::contain {

struct LeafMove {
  // The host is one where the move matters (pure v2 with limit controllers,
  // a group that is not the true root); `moved` says whether it was made.
  bool needed = false;
  bool moved = false;
  // The leaf the process now runs in ("/sys/fs/cgroup/system.slice/
  // cordon.service/supervisor"); empty when not moved.
  std::string leaf;
  // When moved: the cgroup root (relative to the v2 mount, as
  // PlanOptions::cgroup_root takes it) that keeps the sandboxes' groups
  // beside the leaf: "<own group>/cordon".
  std::optional<std::string> cgroup_root;
  // Why it moved or did not, in words, for the daemon's log.
  std::string note;
};

// The leaf's name beneath the group the daemon was started in.
inline constexpr const char* kSupervisorLeaf = "supervisor";

// Moves process `self` (the caller) into a leaf of its v2 group when that
// is what lets its children have controllers: a pure v2 host (no v1
// hierarchy holds memory, pids or cpu), a v2 tree that has any of them, a
// group that is not the true root, and the caller alone in it (moving out
// of a group others share would not empty it). Never fails: a move that is
// not needed or cannot be made is said in `note`, and planning then goes on
// from where the process is.
LeafMove MoveIntoLeaf(const CgroupLayout& layout, pid_t self, const CgroupHost& host = ThisHost());

}  // namespace cordon::contain
