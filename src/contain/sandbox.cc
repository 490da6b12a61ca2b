#include "contain/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "contain/namespaces.h"

namespace cordon::contain {
namespace {

// The host's device nodes a sandbox without a mount namespace may use.
constexpr const char* kHostDevices[] = {"/dev/null",    "/dev/zero", "/dev/full", "/dev/random",
                                        "/dev/urandom", "/dev/tty",  "/dev/pts",  "/dev/ptmx"};

// How deep GiveTree goes: one descriptor is open per level.
constexpr int kGiveDepth = 128;

// Changes the owner of the directory `dir_fd` and of everything in it,
// never following a symbolic link and never leaving its filesystem. What
// is in it was made by earlier sandboxes of the same workspace, none of
// which runs any more; a hard link in it cannot lead outside (link(2)
// refuses to cross mounts, and a sandbox sees the host only through mounts).
sys::Result<void> GiveDirectory(int dir_fd, dev_t dev, uint32_t uid, uint32_t gid, int depth) {
  if (::fchown(dir_fd, uid, gid) != 0) return sys::FailErrno("fchown");
  if (depth >= kGiveDepth) {
    return sys::Fail("the workspace is nested more than " + std::to_string(kGiveDepth) +
                     " directories deep");
  }
  int listing = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing < 0) return sys::FailErrno("openat(\".\")");
  DIR* dir = ::fdopendir(listing);
  if (dir == nullptr) {
    ::close(listing);
    return sys::FailErrno("fdopendir");
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, ::closedir);
  while (struct dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return sys::FailErrno("fstatat(\"" + name + "\")");
    }
    if (st.st_dev != dev) continue;  // a mount point: not the workspace's
    if (S_ISDIR(st.st_mode)) {
      int child = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) return sys::FailErrno("openat(\"" + name + "\")");
      sys::UniqueFd owned(child);
      if (auto given = GiveDirectory(child, dev, uid, gid, depth + 1); !given) {
        return std::unexpected(given.error().Context(name));
      }
    } else if (::fchownat(dir_fd, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0 &&
               errno != ENOENT) {
      return sys::FailErrno("fchownat(\"" + name + "\")");
    }
  }
  return {};
}

// The detached copy `tree_fd` of a workspace, with all that is in it, given
// to `uid` and `gid`.
sys::Result<void> GiveTree(int tree_fd, uint32_t uid, uint32_t gid) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd root,
                          sys::OpenAt(tree_fd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  struct stat st {};
  if (::fstat(root.get(), &st) != 0) return sys::FailErrno("fstat");
  return GiveDirectory(root.get(), st.st_dev, uid, gid, 0);
}

}  // namespace

sys::Result<Sandbox> Sandbox::Prepare(const SandboxRequest& r) {
  const IsolationSpec& spec = *r.spec;
  Sandbox s;
  s.outside_uid_ = r.outside_uid;
  s.outside_gid_ = r.outside_gid;
  s.lease_fd_ = r.lease_fd;
  bool tcp_refused = false;

  if (spec.private_workspace && !r.namespaces) {
    return sys::Fail("a private workspace needs a mount namespace of the sandbox's own");
  }
  if (r.namespaces) {
    s.clone_flags_ = SandboxCloneFlags();
    s.new_network_ = spec.network == Network::kNone;
    s.workspace_made_ = spec.workspace_made;
    s.workspace_ = r.workspace;
    MountRequest m{spec.system_dirs,   spec.hidden_paths, spec.binds, r.workspace, -1,
                   spec.tmp_size_bytes};
    // The workspace appears owned by the sandbox's root through an
    // idmapped mount, so what it creates belongs to the directory's owner
    // outside. Only a root supervisor can idmap (CAP_SYS_ADMIN where the
    // filesystem was mounted); an unprivileged caller's sandbox is mapped
    // to the caller's own id, so the caller's directory is root's inside.
    struct stat st {};
    bool privileged_ids = r.outside_uid != ::getuid();
    if (spec.private_workspace) {
      // Mounted by the sandbox's root inside, so it is that root's.
      m.workspace_tmpfs = "mode=0700" + TmpfsLimitOptions(r.private_workspace_limits);
    } else if (privileged_ids && ::stat(r.workspace.c_str(), &st) == 0) {
      auto tree = DetachedTree(r.workspace);
      if (!tree && tree.error().errno_value() != EPERM && tree.error().errno_value() != ENOSYS) {
        return std::unexpected(tree.error().Context("the workspace"));
      }
      // EPERM: no CAP_SYS_ADMIN over this mount namespace (a root in a
      // container); the child then binds the workspace by path.
      if (tree) s.workspace_tree_ = std::move(*tree);
      m.workspace_tree = s.workspace_tree_.get();
      auto idmapped = [&]() -> sys::Result<void> {
        if (!tree) return std::unexpected(tree.error());
        if (st.st_uid == 0 && st.st_gid == 0) {
          s.idmap_in_enter_ = true;  // the sandbox's own namespace maps 0 to its id
          return {};
        }
        CORDON_ASSIGN_OR_RETURN(sys::UniqueFd userns, MakeUserNamespace(st.st_uid, r.outside_uid,
                                                                        st.st_gid, r.outside_gid));
        return IdmapTree(s.workspace_tree_.get(), userns.get());
      }();
      // Not idmapped, the copy is attached as it is (the supervisor opened
      // it, so its parents need not be reachable by the sandbox's id).
      if (!idmapped) CORDON_RETURN_IF_ERROR(s.NotIdmapped(idmapped.error()));
    }
    CORDON_ASSIGN_OR_RETURN(MountPlan plan, MountPlan::Build(m));
    s.mounts_.emplace(std::move(plan));
  } else {
    // No namespace: Landlock and seccomp keep what they can out.
    tcp_refused = spec.network == Network::kNone;
    if (r.outside_uid != ::getuid()) {
      s.workspace_made_ = spec.workspace_made;
      s.workspace_ = r.workspace;
      CORDON_RETURN_IF_ERROR(s.RunAsOutsideIds());
    }
  }

  if (r.landlock_abi > 0) {
    s.landlock_ = std::make_unique<LandlockPolicy>(r.landlock_abi, tcp_refused);
    LandlockPolicy& l = *s.landlock_;
    if (s.mounts_) {
      for (const auto& p : s.mounts_->read_only()) l.Allow(p, LandlockAccess::kReadExec);
      for (const auto& p : s.mounts_->writable()) l.Allow(p, LandlockAccess::kReadWrite);
      l.Allow("/", LandlockAccess::kList);
      l.Allow("/proc", LandlockAccess::kProcFs);
      l.Allow("/dev", LandlockAccess::kDevices);
      l.Allow("/dev/shm", LandlockAccess::kReadWrite);
    } else {
      // The host's own view: only what was declared, under its own names.
      for (const auto& p : spec.system_dirs) l.Allow(p, LandlockAccess::kReadExec);
      for (const Bind& b : spec.binds) {
        l.Allow(b.source, b.writable ? LandlockAccess::kReadWrite : LandlockAccess::kReadExec);
        if (b.target != b.source) {
          s.notes_.push_back("bind " + b.source + " is visible at its own path, not at " +
                             b.target + ": there is no mount namespace");
        }
      }
      l.Allow(r.workspace, LandlockAccess::kReadWrite);
      l.Allow("/proc", LandlockAccess::kProcFs);
      for (const char* dev : kHostDevices) l.Allow(dev, LandlockAccess::kDevices);
      s.notes_.push_back(
          "no mount namespace: the workspace keeps its host path and /tmp is not writable");
      if (!spec.hidden_paths.empty()) {
        // Landlock only allows: it cannot refuse a path beneath a directory
        // it allows, and there is no mount to cover it with.
        s.notes_.push_back(
            "no mount namespace: hidden_paths are not covered; only their file modes keep them "
            "from the command (run where user namespaces are allowed to hide them)");
      }
    }
    if (r.exec_fd >= 0) l.AllowExecFd(r.exec_fd);
    s.landlock_plan_ = l.plan();
  }

  if (r.seccomp) {
    SeccompOptions options;
    options.strict = spec.level == Isolation::kStrict;
    options.unix_sockets_only = !r.namespaces && spec.network == Network::kNone;
    options.extra_deny = spec.seccomp_deny;
    CORDON_ASSIGN_OR_RETURN(SeccompFilter filter, SeccompFilter::Build(options));
    s.filter_.emplace(std::move(filter));
  }
  return s;
}

void Sandbox::CloseTrees() {
  if (mounts_) mounts_->CloseTrees();
  workspace_tree_.reset();
}

sys::Result<void> Sandbox::Enter(pid_t child) {
  CORDON_RETURN_IF_ERROR(WriteIdMaps(child, outside_uid_, outside_gid_));
  if (!idmap_in_enter_) return {};
  auto idmapped = [&]() -> sys::Result<void> {
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd userns,
                            sys::Open("/proc/" + std::to_string(child) + "/ns/user", O_RDONLY));
    return IdmapTree(workspace_tree_.get(), userns.get());
  }();
  // The child attaches the tree either way: not idmapped, it is a plain copy.
  if (!idmapped) return NotIdmapped(idmapped.error());
  return {};
}

sys::Result<void> Sandbox::RunAsOutsideIds() {
  switch_ids_ = true;
  const std::string ids =
      "uid " + std::to_string(outside_uid_) + " and gid " + std::to_string(outside_gid_);
  const std::string reach =
      " (its command starts there; by its host path it is reachable only where the parent "
      "directories let that uid through)";
  if (!workspace_made_) {
    notes_.push_back("no user namespace: the sandbox runs as " + ids +
                     ", its own, and can read and write in the workspace " + workspace_ +
                     " only what that uid may" + reach);
    return {};
  }
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd dir,
                          sys::Open(workspace_, O_PATH | O_DIRECTORY | O_NOFOLLOW));
  if (auto given = GiveTree(dir.get(), outside_uid_, outside_gid_); !given) {
    return std::unexpected(
        given.error().Context("give the workspace " + workspace_ + " to " + ids));
  }
  notes_.push_back("no user namespace: the sandbox runs as " + ids +
                   ", its own; cordon made the workspace " + workspace_ +
                   ", so it was given (chowned) to that uid" + reach);
  return {};
}

sys::Result<void> Sandbox::NotIdmapped(const sys::Error& why) {
  // The copy keeps the attributes a plain bind has (without mount_setattr,
  // the child remounts it so).
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (workspace_tree_ &&
      ::syscall(SYS_mount_setattr, workspace_tree_.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) !=
          0 &&
      errno != ENOSYS) {
    return sys::FailErrno(
        "mount_setattr(the workspace's copy, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)");
  }
  const std::string ids =
      "uid " + std::to_string(outside_uid_) + " and gid " + std::to_string(outside_gid_);
  if (!workspace_made_) {
    // A caller's directory is never chowned: the sandbox gets what the
    // modes give its outside id, which is all it can do there.
    notes_.push_back("the workspace " + workspace_ + " is not idmapped (" + why.message() +
                     "); the sandbox runs as outside " + ids +
                     " and can read and write there only what that uid may: its files show as "
                     "owned by nobody inside, and what it creates belongs to that uid outside");
    return {};
  }
  // cordon made it (a session's, a run's scratch): it is given to the
  // sandbox, so that the sandbox's root owns it inside as it would through
  // the idmapping.
  sys::UniqueFd by_path;  // no copy: the child binds the path
  if (!workspace_tree_) {
    CORDON_ASSIGN_OR_RETURN(by_path, sys::Open(workspace_, O_PATH | O_DIRECTORY | O_NOFOLLOW));
  }
  const int tree = workspace_tree_ ? workspace_tree_.get() : by_path.get();
  if (auto given = GiveTree(tree, outside_uid_, outside_gid_); !given) {
    return std::unexpected(
        given.error().Context("give the workspace " + workspace_ + " to outside " + ids));
  }
  notes_.push_back("the workspace " + workspace_ + " is not idmapped (" + why.message() +
                   "); cordon made it, so it was given (chowned) to the sandbox's outside " + ids +
                   ", whose root owns it inside");
  return {};
}

}  // namespace cordon::contain
