// The `disk` capability: at most so many bytes and inodes in a workspace
// the daemon makes. Three mechanisms, strongest first:
//   project_quota  the state directory's filesystem enforces project quotas
//                  (XFS, or ext4 with the `project` feature mounted with
//                  prjquota): the workspace directory gets a project id of
//                  its own with hard limits;
//   tmpfs          an ephemeral workspace is a size-capped tmpfs (its pages
//                  are memory: they count toward the run's memory bound);
//   loop_image     the workspace is an ext4 image of its own,
//                  <workspace>.img, loop-mounted on the directory.
// What the host offers is observed once (ProbeDisk); what a workspace has is
// observed again at admission (WorkspaceDiskStatus), so a grant claims a
// bound only where the workspace has one.
#pragma once

#include <cerrno>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sys/error.h"

namespace cordon::contain {

struct CapabilityStatus;  // probe.h

enum class WorkspaceKind {
  kEphemeral,   // a run's scratch: made empty, removed when the run ends
  kPersistent,  // a session's: survives the daemon, reused by the next generation
};

struct DiskLimits {
  std::optional<int64_t> bytes;
  std::optional<int64_t> inodes;  // files, directories and the workspace itself
  bool any() const { return bytes || inodes; }
};

// What bounds this host can put on the workspaces under a state directory,
// each observed: a project quota set and charged, a tmpfs mounted (and
// idmapped, where a sandbox would need it), loop devices and mkfs.ext4 there.
struct DiskSupport {
  std::string state_dir;   // where it was observed; "" when not probed (the CLI)
  std::string filesystem;  // the state directory's ("ext4", "xfs", "tmpfs", ...)
  bool project_quota = false;
  bool tmpfs = false;
  bool loop_images = false;
  // Each image takes its whole size of the state directory's filesystem
  // when made or mounted (--reserve-disk), not as it is written: what a
  // sandbox writes into it is then never lost to that filesystem filling.
  bool reserve_images = false;
  std::string project_quota_problem;  // why not, for each that is false
  std::string tmpfs_problem;
  std::string loop_problem;
};

// Observes what can bound workspaces under `state_dir` (which must exist).
// Costs about a millisecond: a tmpfs is mounted and unmounted, a project
// quota set and cleared on a scratch directory. `reserve_images`: images
// are to be reserved whole, which the filesystem must then do (or loop
// images are not used).
DiskSupport ProbeDisk(const std::string& state_dir, bool reserve_images = false);

// The mount options that bound a tmpfs workspace: ",size=N,nr_inodes=M",
// each where it is set.
std::string TmpfsLimitOptions(const DiskLimits& limits);

// What a workspace of `kind` gets here: enforced with its mechanism, or not
// enforceable with the reason and the fix.
CapabilityStatus DiskStatus(const DiskSupport& support, WorkspaceKind kind);

// The probe's one entry for `disk`: enforceable when workspaces of both
// kinds can be bounded.
CapabilityStatus DiskProbeStatus(const DiskSupport& support);

// {"state_dir", "filesystem", "project_quota", "tmpfs", "loop_images",
//  "problems": {...}, "ephemeral": mechanism|null, "persistent": mechanism|null}.
nlohmann::json ToJson(const DiskSupport& support);

// Bounds the workspace directory `dir` (made by the caller, mode 0700) to
// `limits` with the strongest mechanism for `kind`; returns the mechanism.
// A persistent workspace already bounded (its image exists, or it has a
// project id of cordon's) keeps its bound: the image is mounted again if it
// is not, a project quota gets the new limits; a non-empty directory that
// was never bounded is refused (its files would be hidden or not counted).
sys::Result<std::string> BoundWorkspace(const DiskSupport& support, const std::string& dir,
                                        WorkspaceKind kind, const DiskLimits& limits);

// The state directory's filesystem now: its size and free bytes (for an
// unprivileged writer), and what the workspace images (*.img) in
// `image_dirs` may still take of it (their size less what they hold: a
// sparse image takes room only as it is written, so more than is free
// means a full filesystem may lose what sandboxes write).
struct StateRoom {
  uint64_t size_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t images_unwritten_bytes = 0;
};
sys::Result<StateRoom> ObserveStateRoom(const std::string& state_dir,
                                        const std::vector<std::string>& image_dirs);

// Whether BoundWorkspace failed for want of room on the state directory's
// filesystem (ENOSPC, EDQUOT: an image that could not be copied or
// reserved), not for want of a mechanism: the workspace is then not made
// at all (507), never made unbounded instead.
inline bool NoRoom(const sys::Error& e) {
  return e.errno_value() == ENOSPC || e.errno_value() == EDQUOT;
}

// Detaches the filesystem of its own mounted on `dir` (a tmpfs, a loop
// image: the image stays, and BoundWorkspace mounts it again when the
// workspace is reused); a project quota stays. So a workspace is mounted
// only while its session is live, and nothing is left mounted by a daemon
// that stopped.
sys::Result<void> ReleaseWorkspace(const std::string& dir);

// Undoes the bound of `dir` and removes it with everything in it: its
// mount is detached (a loop device frees itself once the last user is
// gone), its image deleted, its project quota cleared once nothing is
// charged to it. Symbolic links inside are removed, never followed. A
// directory that is not there is not an error.
sys::Result<void> RemoveBoundWorkspace(const std::string& dir);

// Renames workspace `from` to `to` (which must not exist), bound or not:
// rename(2) refuses a mount point (EBUSY), so a filesystem of its own is
// moved (MS_MOVE) onto a new directory and its image renamed beside it. A
// sandbox that already shows it keeps it: its mount namespace holds the
// same filesystem, whatever the path is outside.
sys::Result<void> MoveBoundWorkspace(const std::string& from, const std::string& to);

// The bound `dir` has now, as observed: the mechanism when its filesystem
// of its own or its project quota holds it within `limits`, else why not.
sys::Result<std::string> ObserveBound(const std::string& dir, const DiskLimits& limits);

// The `disk` status of a grant whose workspace is `workspace`: enforced
// when ObserveBound finds it bounded; otherwise not, with what was seen and
// the fix. `sandbox_privileged`: the sandbox will hold CAP_SYS_RESOURCE in
// the initial user namespace (root without a user namespace), which lets it
// write past an ext4 project quota (XFS quotas and full filesystems bind
// root too).
CapabilityStatus WorkspaceDiskStatus(const DiskSupport& support, const std::string& workspace,
                                     const DiskLimits& limits, bool sandbox_privileged);

}  // namespace cordon::contain
