#include "contain/sandbox.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contain/namespaces.h"

namespace cordon::contain {
namespace {

// The host's device nodes a sandbox without a mount namespace may use.
constexpr const char* kHostDevices[] = {"/dev/null",    "/dev/zero", "/dev/full", "/dev/random",
                                        "/dev/urandom", "/dev/tty",  "/dev/pts",  "/dev/ptmx"};

}  // namespace

sys::Result<Sandbox> Sandbox::Prepare(const SandboxRequest& r) {
  const IsolationSpec& spec = *r.spec;
  Sandbox s;
  s.outside_uid_ = r.outside_uid;
  s.outside_gid_ = r.outside_gid;
  s.lease_fd_ = r.lease_fd;
  bool tcp_refused = false;

  if (r.namespaces) {
    s.clone_flags_ = SandboxCloneFlags();
    s.new_network_ = spec.network == Network::kNone;
    MountRequest m{spec.system_dirs,   spec.hidden_paths, spec.binds, r.workspace, -1,
                   spec.tmp_size_bytes};
    // The workspace appears owned by the sandbox's root through an
    // idmapped mount, so what it creates belongs to the directory's owner
    // outside. Only a root supervisor can idmap (CAP_SYS_ADMIN where the
    // filesystem was mounted); an unprivileged caller's sandbox is mapped
    // to the caller's own id, so the caller's directory is root's inside.
    struct stat st {};
    bool privileged_ids = r.outside_uid != ::getuid();
    if (privileged_ids && ::stat(r.workspace.c_str(), &st) == 0) {
      auto idmapped = [&]() -> sys::Result<void> {
        CORDON_ASSIGN_OR_RETURN(s.workspace_tree_, DetachedTree(r.workspace));
        if (st.st_uid == 0 && st.st_gid == 0) {
          s.idmap_in_enter_ = true;  // the sandbox's own namespace maps 0 to its id
          return {};
        }
        CORDON_ASSIGN_OR_RETURN(sys::UniqueFd userns, MakeUserNamespace(st.st_uid, r.outside_uid,
                                                                        st.st_gid, r.outside_gid));
        return IdmapTree(s.workspace_tree_.get(), userns.get());
      }();
      if (idmapped) {
        m.workspace_tree = s.workspace_tree_.get();
      } else {
        s.workspace_tree_.reset();
        s.idmap_in_enter_ = false;
        s.notes_.push_back("the workspace is not idmapped (" + idmapped.error().message() +
                           "): it is bound as it is, owned by nobody inside, and writable only "
                           "where its mode lets others write");
      }
    }
    s.mounts_.emplace(MountPlan::Build(m));
  } else if (spec.network == Network::kNone) {
    tcp_refused = true;  // no namespace: Landlock and seccomp keep what they can out
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

sys::Result<void> Sandbox::Enter(pid_t child) {
  CORDON_RETURN_IF_ERROR(WriteIdMaps(child, outside_uid_, outside_gid_));
  if (!idmap_in_enter_) return {};
  auto idmapped = [&]() -> sys::Result<void> {
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd userns,
                            sys::Open("/proc/" + std::to_string(child) + "/ns/user", O_RDONLY));
    return IdmapTree(workspace_tree_.get(), userns.get());
  }();
  // The child attaches the tree either way: not idmapped, it is a plain bind.
  if (!idmapped) {
    notes_.push_back("the workspace is not idmapped (" + idmapped.error().message() +
                     "): it is owned by nobody inside, and writable only where its mode lets "
                     "others write");
  }
  return {};
}

}  // namespace cordon::contain
