// The filesystem view of a sandbox: a fresh tmpfs root holding read-only
// binds of the system directories (secrets beneath them covered), the
// workspace read-write at /workspace, a private size-capped /tmp, a new
// /proc, a minimal /dev and the extra binds; nosuid and nodev everywhere,
// noexec where nothing needs to run. The supervisor turns the request into
// a list of steps (every string made in advance); the child, in its new
// user and mount namespaces, only runs them.
//
// Every host path shown inside (system directories, device nodes, binds,
// closures, the workspace) is opened by the supervisor:
// open_tree(OPEN_TREE_CLONE) on the path it resolved with its own
// credentials, its attributes set on the detached copy, and the child only
// attaches it (move_mount). So what the caller can reach can be shown,
// though the sandbox's outside id could not traverse the path. Secrets are
// covered by an empty read-only file on a tmpfs the child makes, never by a
// host inode. Inside the new namespaces, a target beneath a writable mount
// (the workspace, /tmp, a writable bind), where a run may have left links,
// is resolved one component at a time following none (mounts.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "contain/spec.h"
#include "sys/fd.h"

namespace cordon::contain {

// Where the workspace appears inside; the command starts there.
inline constexpr const char* kSandboxWorkspace = "/workspace";

// Child side: plain data only.
struct MountStep {
  enum class Op : uint8_t {
    kMkdir,    // mkdir(target, mode); an existing one is fine
    kFile,     // an empty file as a mount point
    kSymlink,  // symlink(source, target)
    kBind,     // bind source (recursively) at target, then set `attr` on it
    kTmpfs,    // a tmpfs at target: `flags`, options in `source`
    kProc,     // a new procfs for the new pid namespace
    kDevpts,   // a private devpts instance (options in `source`)
    kAttach,   // move the detached tree `fd` to target (`source` names it), then
               // set `attr` on it: nonzero only where the supervisor could not
               // (no mount_setattr before Linux 5.12: remounted instead)
    kRemount,  // a mount beneath an attached tree: add `attr` by remounting it
               // (only without mount_setattr, which sets it on the whole tree)
  };
  Op op;
  const char* source;
  const char* target;
  unsigned long flags;  // MS_* for kTmpfs
  uint64_t attr;        // MOUNT_ATTR_* for kBind
  uint32_t mode;        // kMkdir, kFile
  int fd;               // kAttach
};

// Whether this kernel has mount_setattr (Linux 5.12); without it attributes
// are set by remounting each mount (mount(MS_REMOUNT | MS_BIND)).
bool HasMountSetattr();

struct MountRequest {
  std::vector<std::string> system_dirs;
  std::vector<std::string> hidden_paths;
  std::vector<Bind> binds;
  std::string workspace;    // host path, shown at /workspace
  int workspace_tree = -1;  // a detached (idmapped) copy of it, or -1: the plan opens one
  int64_t tmp_size_bytes = 0;
  // Set: /workspace is a new tmpfs with these options (a private workspace),
  // and `workspace` is not shown.
  std::string workspace_tmpfs;
};

class MountPlan final {
 public:
  // Looks at the host (lstat) to skip what is missing and to recreate
  // symlinks such as a merged /usr's /bin -> usr/bin, and opens every host
  // path it shows (the plan owns the detached trees until the child has
  // attached them). Fails when a path it shows cannot be opened: the error
  // names the path ("bind /a/data: open_tree(...): EACCES").
  static sys::Result<MountPlan> Build(const MountRequest& request);
  MountPlan(MountPlan&&) noexcept = default;

  const MountStep* steps() const { return steps_.data(); }
  size_t size() const { return steps_.size(); }
  // "bind /usr", for a setup error that names the failing step.
  std::string Describe(size_t index) const;
  // Closes the detached trees (once the child has its copies); the steps
  // still describe themselves, but can no longer be carried out.
  void CloseTrees() { trees_.clear(); }
  // The paths shown inside, each with what Landlock should allow there.
  const std::vector<std::string>& read_only() const { return read_only_; }
  const std::vector<std::string>& writable() const { return writable_; }

 private:
  MountPlan() = default;
  const char* Keep(std::string s);
  void EnsureDir(const std::string& path, uint32_t mode = 0755);
  void Add(MountStep::Op op, const std::string& source, const std::string& target,
           unsigned long flags = 0, uint64_t attr = 0, uint32_t mode = 0, int fd = -1);
  // Opens `source` detached (recursively: its submounts with it), sets
  // `attr` on the copy, and adds the step that attaches it at `target`.
  sys::Result<void> AddTree(const std::string& source, const std::string& target, uint64_t attr,
                            bool recursive);

  std::vector<std::unique_ptr<std::string>> strings_;  // stable addresses
  std::vector<sys::UniqueFd> trees_;                   // the detached trees the steps attach
  std::vector<MountStep> steps_;
  std::vector<std::string> made_dirs_;
  std::vector<std::string> read_only_;
  std::vector<std::string> writable_;
};

// Child side, async-signal-safe: mounts a tmpfs on /tmp, pivots into it
// (the host's root then sits at /.oldroot, where the steps' sources are),
// runs the steps, detaches the host's root and makes the new root
// read-only. Returns 0 or an errno value; `failed` is the index of the
// failing step, or -1 when the failure was in the frame around them.
int BuildRoot(const MountStep* steps, size_t count, int* failed);

}  // namespace cordon::contain
