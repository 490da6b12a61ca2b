#include "session/workspace.h"

#include <sys/stat.h>

#include <cerrno>

#include "contain/disk.h"

namespace cordon::session {

bool ValidSessionId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string WorkspacePath(const std::string& state_dir, const std::string& id) {
  return state_dir + "/workspaces/" + id;
}

sys::Result<void> PrepareWorkspace(const std::string& state_dir, const std::string& id, bool sweep,
                                   mode_t parent_mode) {
  if (!ValidSessionId(id)) return sys::Fail("invalid session id", EINVAL);
  const std::string parent = state_dir + "/workspaces";
  if (::mkdir(parent.c_str(), parent_mode) != 0 && errno != EEXIST) {
    return sys::FailErrno("mkdir(\"" + parent + "\")");
  }
  (void)::chmod(parent.c_str(), parent_mode);
  const std::string path = WorkspacePath(state_dir, id);
  if (sweep) CORDON_RETURN_IF_ERROR(RemoveWorkspace(state_dir, id));
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return sys::FailErrno("mkdir(\"" + path + "\")");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return sys::FailErrno("lstat(\"" + path + "\")");
  if (!S_ISDIR(st.st_mode)) return sys::Fail(path + " is not a directory", ENOTDIR);
  if (::chmod(path.c_str(), 0700) != 0) return sys::FailErrno("chmod(\"" + path + "\", 0700)");
  return {};
}

sys::Result<void> RemoveWorkspace(const std::string& state_dir, const std::string& id) {
  if (!ValidSessionId(id)) return sys::Fail("invalid session id", EINVAL);
  // Its disk bound goes first: a mounted image is detached and deleted, a
  // project quota cleared; a workspace without one is only removed.
  return contain::RemoveBoundWorkspace(WorkspacePath(state_dir, id));
}

}  // namespace cordon::session
