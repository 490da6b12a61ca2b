// Session workspaces: <state>/workspaces/<id>, mode 0700 under 0700 parents,
// so nothing but root and the session's own processes can reach them.
// (Where sandboxes run as uids of their own without a mount namespace, the
// parents are 0711: passable by path, not listable.)
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "sys/error.h"

namespace cordon::session {

// What a session id matches: safe as a path component, a cgroup name part
// and an owner label.
inline constexpr std::string_view kSessionIdPattern = "^[A-Za-z0-9_-]{1,64}$";
bool ValidSessionId(std::string_view id);

std::string WorkspacePath(const std::string& state_dir, const std::string& id);

// Makes the workspace with mode 0700, and <state>/workspaces with
// `parent_mode`. `sweep`: a directory already there (a stale one from a
// closed or invalidated generation) is removed first, so the new
// generation starts empty.
sys::Result<void> PrepareWorkspace(const std::string& state_dir, const std::string& id, bool sweep,
                                   mode_t parent_mode = 0700);

// Removes the workspace and everything in it, its disk bound first (an
// image unmounted and deleted: contain/disk.h RemoveBoundWorkspace).
// Symbolic links inside are removed, never followed.
sys::Result<void> RemoveWorkspace(const std::string& state_dir, const std::string& id);

}  // namespace cordon::session
