// Everything a sandboxed launch needs, prepared by the supervisor before
// clone3: which namespaces, the id maps, the mount plan, the Landlock rules
// and the compiled seccomp filter. Launch hands the child plain pointers
// into it; after clone3 the supervisor finishes the user namespace (Enter)
// before the child may go on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "contain/disk.h"
#include "contain/landlock.h"
#include "contain/mounts.h"
#include "contain/seccomp.h"
#include "contain/spec.h"
#include "sys/fd.h"

namespace cordon::contain {

// What this host offers and what the grant decided, as Prepare needs it.
struct SandboxRequest {
  const IsolationSpec* spec = nullptr;
  std::string workspace;    // absolute host path
  bool namespaces = false;  // user (and the other) namespaces can be made
  bool seccomp = false;     // the kernel takes seccomp filters
  int landlock_abi = 0;     // 0: no Landlock
  // The outside id of the sandbox's root (root supervisor: a leased id;
  // otherwise the caller's own uid and gid); without namespaces, the ids
  // the sandbox runs as.
  uint32_t outside_uid = 0;
  uint32_t outside_gid = 0;
  int lease_fd = -1;  // held by the sandbox's init
  int exec_fd = -1;   // a verified file to execute, allowed by Landlock
  // spec->private_workspace: the bounds of its tmpfs.
  DiskLimits private_workspace_limits;
};

class Sandbox final {
 public:
  static sys::Result<Sandbox> Prepare(const SandboxRequest& request);
  Sandbox(Sandbox&&) noexcept = default;

  // clone3 flags: the namespaces, or 0 (Landlock and seccomp only).
  uint64_t clone_flags() const { return clone_flags_; }
  bool namespaced() const { return clone_flags_ != 0; }
  // A network namespace of its own (not --network host).
  bool new_network() const { return new_network_; }
  const MountPlan* mounts() const { return mounts_ ? &*mounts_ : nullptr; }
  const LandlockPlan* landlock() const { return landlock_plan_; }
  const struct sock_fprog* seccomp() const { return filter_ ? filter_->program() : nullptr; }
  int lease_fd() const { return lease_fd_; }
  // Without a user namespace, a root supervisor's sandbox runs as its
  // outside ids (a leased, unprivileged uid): the child switches to them.
  bool switches_ids() const { return switch_ids_; }
  uint32_t outside_uid() const { return outside_uid_; }
  uint32_t outside_gid() const { return outside_gid_; }

  // Parent side, after clone3 and before the child goes on: the child's id
  // maps, and the idmapping of the workspace to its user namespace.
  sys::Result<void> Enter(pid_t child);

  // After the launch, once the child holds its own copies: closes the
  // detached mount trees (the workspace's among them), which would pin the
  // sandbox's filesystems past its death. The plan still names its steps.
  void CloseTrees();

  // What the sandbox does differently from the full view, in words (the
  // run's warnings): a workspace that is not idmapped (and whether it was
  // given to the sandbox's outside id, or what that id may do in a caller's
  // directory), a /tmp that is not private.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  Sandbox() = default;
  // The workspace's copy could not be idmapped (`why`): attached as it is,
  // given to the outside ids if cordon made it, and the notes say which.
  sys::Result<void> NotIdmapped(const sys::Error& why);
  // No user namespace, and the outside ids are not the supervisor's own:
  // the sandbox runs as them, and a workspace cordon made is given to them.
  sys::Result<void> RunAsOutsideIds();

  uint64_t clone_flags_ = 0;
  bool new_network_ = false;
  uint32_t outside_uid_ = 0;
  uint32_t outside_gid_ = 0;
  int lease_fd_ = -1;
  bool switch_ids_ = false;
  // Idmapping after clone3, through the child's own user namespace (a
  // workspace owned by root), else done in Prepare.
  bool idmap_in_enter_ = false;
  // cordon made the workspace: where it cannot be idmapped, it is given
  // (chowned) to the sandbox's outside ids instead.
  bool workspace_made_ = false;
  std::string workspace_;
  sys::UniqueFd workspace_tree_;
  std::optional<MountPlan> mounts_;
  std::unique_ptr<LandlockPolicy> landlock_;
  const LandlockPlan* landlock_plan_ = nullptr;
  std::optional<SeccompFilter> filter_;
  std::vector<std::string> notes_;
};

}  // namespace cordon::contain
