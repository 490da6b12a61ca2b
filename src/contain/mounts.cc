#include "contain/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace cordon::contain {
namespace {

// During setup the host's root is here (inside the new root).
constexpr const char* kOldRoot = "/.oldroot";

constexpr uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr uint64_t kWritable = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

// The device nodes a program expects; bound from the host's /dev (a user
// namespace cannot mknod).
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

int SetAttr(const char* target, uint64_t attr, unsigned flags) {
  struct mount_attr a {};
  a.attr_set = attr;
  return ::syscall(SYS_mount_setattr, AT_FDCWD, target, flags, &a, sizeof a) == 0 ? 0 : errno;
}

int RunStep(const MountStep& s) {
  switch (s.op) {
    case MountStep::Op::kMkdir:
      return ::mkdir(s.target, s.mode) == 0 || errno == EEXIST ? 0 : errno;
    case MountStep::Op::kFile: {
      int fd = ::open(s.target, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, s.mode);
      if (fd < 0) return errno;
      ::close(fd);
      return 0;
    }
    case MountStep::Op::kSymlink:
      return ::symlink(s.source, s.target) == 0 || errno == EEXIST ? 0 : errno;
    case MountStep::Op::kBind:
      // Recursive: a non-recursive bind of a tree with mounts of the host
      // beneath it is refused (they are locked in a user namespace).
      if (::mount(s.source, s.target, nullptr, MS_BIND | MS_REC, nullptr) != 0) return errno;
      return s.attr == 0 ? 0 : SetAttr(s.target, s.attr, AT_RECURSIVE);
    case MountStep::Op::kTmpfs:
      return ::mount("tmpfs", s.target, "tmpfs", s.flags, s.source) == 0 ? 0 : errno;
    case MountStep::Op::kProc:
      return ::mount("proc", s.target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0
                 ? 0
                 : errno;
    case MountStep::Op::kDevpts:
      return ::mount("devpts", s.target, "devpts", MS_NOSUID | MS_NOEXEC, s.source) == 0 ? 0
                                                                                         : errno;
    case MountStep::Op::kAttach:
      return ::syscall(SYS_move_mount, s.fd, "", AT_FDCWD, s.target, MOVE_MOUNT_F_EMPTY_PATH) == 0
                 ? 0
                 : errno;
  }
  return EINVAL;
}

}  // namespace

const char* MountPlan::Keep(std::string s) {
  strings_.push_back(std::make_unique<std::string>(std::move(s)));
  return strings_.back()->c_str();
}

void MountPlan::Add(MountStep::Op op, const std::string& source, const std::string& target,
                    unsigned long flags, uint64_t attr, uint32_t mode, int fd) {
  steps_.push_back(
      MountStep{op, source.empty() ? nullptr : Keep(source), Keep(target), flags, attr, mode, fd});
}

void MountPlan::EnsureDir(const std::string& path, uint32_t mode) {
  if (path == "/" || std::find(made_dirs_.begin(), made_dirs_.end(), path) != made_dirs_.end()) {
    return;
  }
  EnsureDir(Parent(path));
  made_dirs_.push_back(path);
  Add(MountStep::Op::kMkdir, "", path, 0, 0, mode);
}

MountPlan MountPlan::Build(const MountRequest& r) {
  MountPlan plan;
  const std::string old_root = kOldRoot;
  for (const auto& dir : r.system_dirs) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char link[PATH_MAX];
      ssize_t n = ::readlink(dir.c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      plan.EnsureDir(Parent(dir));
      plan.Add(MountStep::Op::kSymlink, std::string(link, static_cast<size_t>(n)), dir);
    } else if (S_ISDIR(st.st_mode)) {
      plan.EnsureDir(dir);
      plan.Add(MountStep::Op::kBind, old_root + dir, dir, 0, kReadOnly);
      plan.read_only_.push_back(dir);
    }
  }
  // Secrets beneath them: a file is covered by the host's /dev/null (it
  // reads as empty, writes go nowhere), a directory by an empty read-only
  // tmpfs.
  for (const auto& path : r.hidden_paths) {
    bool visible = std::any_of(plan.read_only_.begin(), plan.read_only_.end(),
                               [&](const std::string& d) { return path.starts_with(d + "/"); });
    struct stat st {};
    if (!visible || ::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode)) {
      plan.Add(MountStep::Op::kBind, old_root + "/dev/null", path);
    } else if (S_ISDIR(st.st_mode)) {
      plan.Add(MountStep::Op::kTmpfs, "size=4k,nr_inodes=1,mode=000", path,
               MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
    }
  }

  std::string tmp_options = "size=" + std::to_string(r.tmp_size_bytes) + ",mode=1777";
  plan.EnsureDir("/tmp");
  plan.Add(MountStep::Op::kTmpfs, tmp_options, "/tmp", MS_NOSUID | MS_NODEV);
  plan.writable_.push_back("/tmp");

  plan.EnsureDir("/proc");
  plan.Add(MountStep::Op::kProc, "", "/proc");

  // /dev: a small tmpfs (noexec; /dev/shm lives on it) with the host's
  // device nodes bound in, a private devpts, and the usual links. /dev/fd
  // matters beyond habit: verified files are executed through it.
  plan.EnsureDir("/dev");
  plan.Add(MountStep::Op::kTmpfs, "size=" + std::to_string(r.tmp_size_bytes) + ",mode=0755", "/dev",
           MS_NOSUID | MS_NOEXEC);
  for (const char* dev : kDevices) {
    std::string target = std::string("/dev/") + dev;
    plan.Add(MountStep::Op::kFile, "", target, 0, 0, 0444);
    // As the host has them: nosuid and noexec mean nothing for a device.
    plan.Add(MountStep::Op::kBind, old_root + target, target);
  }
  plan.EnsureDir("/dev/pts");
  plan.Add(MountStep::Op::kDevpts, "newinstance,ptmxmode=0666,mode=620", "/dev/pts");
  plan.Add(MountStep::Op::kSymlink, "pts/ptmx", "/dev/ptmx");
  plan.Add(MountStep::Op::kSymlink, "/proc/self/fd", "/dev/fd");
  plan.Add(MountStep::Op::kSymlink, "/proc/self/fd/0", "/dev/stdin");
  plan.Add(MountStep::Op::kSymlink, "/proc/self/fd/1", "/dev/stdout");
  plan.Add(MountStep::Op::kSymlink, "/proc/self/fd/2", "/dev/stderr");
  plan.EnsureDir("/dev/shm", 01777);

  plan.EnsureDir(kSandboxWorkspace);
  if (r.workspace_tree >= 0) {
    plan.Add(MountStep::Op::kAttach, "", kSandboxWorkspace, 0, 0, 0, r.workspace_tree);
  } else {
    plan.Add(MountStep::Op::kBind, old_root + r.workspace, kSandboxWorkspace, 0, kWritable);
  }
  plan.writable_.push_back(kSandboxWorkspace);

  for (const Bind& b : r.binds) {
    struct stat st {};
    bool is_dir = ::stat(b.source.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
      plan.EnsureDir(b.target);
    } else {
      plan.EnsureDir(Parent(b.target));
      plan.Add(MountStep::Op::kFile, "", b.target, 0, 0, 0444);
    }
    plan.Add(MountStep::Op::kBind, old_root + b.source, b.target, 0,
             b.writable ? kWritable : kReadOnly);
    (b.writable ? plan.writable_ : plan.read_only_).push_back(b.target);
  }
  return plan;
}

std::string MountPlan::Describe(size_t index) const {
  if (index >= steps_.size()) return "the new root";
  const MountStep& s = steps_[index];
  static constexpr const char* kNames[] = {"mkdir", "create", "symlink", "bind",
                                           "tmpfs", "proc",   "devpts",  "attach"};
  std::string what = kNames[static_cast<int>(s.op)];
  if (s.op == MountStep::Op::kBind && s.source) {
    std::string source = s.source;
    if (source.starts_with(kOldRoot)) source = source.substr(std::string(kOldRoot).size());
    return what + " " + source + " at " + s.target;
  }
  return what + " " + s.target;
}

int BuildRoot(const MountStep* steps, size_t count, int* failed) {
  *failed = -1;
  // Modes in the plan are meant as written.
  mode_t saved_umask = ::umask(0);
  auto fail = [&](int err) {
    ::umask(saved_umask);
    return err;
  };
  // The new root: a tmpfs mounted over /tmp (only in this mount namespace),
  // made the root with the host's root beneath it at /.oldroot, where the
  // steps find their sources. /tmp of the host shows through there, since
  // the tmpfs left it when it became the root.
  if (::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") != 0) {
    return fail(errno);
  }
  if (::mkdir("/tmp/.oldroot", 0700) != 0) return fail(errno);
  if (::syscall(SYS_pivot_root, "/tmp", "/tmp/.oldroot") != 0) return fail(errno);
  if (::chdir("/") != 0) return fail(errno);
  for (size_t i = 0; i < count; ++i) {
    if (int err = RunStep(steps[i]); err != 0) {
      *failed = static_cast<int>(i);
      return fail(err);
    }
  }
  // Nothing of the host stays reachable: detach its root, then freeze ours.
  if (::umount2(kOldRoot, MNT_DETACH) != 0) return fail(errno);
  if (::rmdir(kOldRoot) != 0) return fail(errno);
  if (int err = SetAttr("/", kReadOnly | MOUNT_ATTR_NOEXEC, 0); err != 0) return fail(err);
  ::umask(saved_umask);
  return 0;
}

}  // namespace cordon::contain
