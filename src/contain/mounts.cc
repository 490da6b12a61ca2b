#include "contain/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace cordon::contain {
namespace {

// During setup the host's root is here (inside the new root).
constexpr const char* kOldRoot = "/.oldroot";

// The cover of secrets: an empty, read-only regular file on a tiny tmpfs
// of the sandbox's own (made read-only as a whole once the file is in it),
// bound over each hidden file and over the /proc files that are masked. No
// inode of the host is ever the cover: a bind of the host's /dev/null would
// make every cover that device (runc's CVE-2025-31133 pattern). BuildRoot
// detaches the tmpfs itself once the binds are made; the binds keep it.
constexpr const char* kCoverDir = "/.cordon-cover";
constexpr const char* kCover = "/.cordon-cover/empty";

// Files of /proc that tell a sandbox about the kernel and the host but that
// no program it runs needs: kernel symbols, timers and scheduler state of
// every process on the host (CVE-2020-8694's class of side channels), the
// kernel's memory. Covered where this kernel has them (docker masks the
// same ones).
constexpr const char* kProcMasks[] = {"kallsyms",   "kcore",       "sched_debug",
                                      "timer_list", "timer_stats", "latency_stats"};

// In MountStep::flags of a kMkdir, kFile, kBind or kAttach step (no MS_*
// flag is this high): its target lies beneath a writable mount (the
// workspace, /tmp, a writable bind), where what is found was made by a run,
// maybe one running now (CVE-2021-30465's pattern). Such a target is
// resolved one component at a time, following no symbolic link: a link
// there fails the step with ELOOP (or ENOTDIR) instead of leading the
// mount, or a directory made for it, elsewhere (into /.oldroot: the host).
constexpr unsigned long kNoSymlinks = 1UL << 62;

constexpr uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr uint64_t kWritable = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

// The device nodes a program expects; bound from the host's /dev (a user
// namespace cannot mknod).
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Without mount_setattr (before Linux 5.12): a bind remount of the one
// mount at `target`, keeping the flags it has (a remount replaces them all:
// dropping one would make a read-only mount of the host writable).
int Remount(const char* target, uint64_t attr) {
  struct statfs st {};
  if (::statfs(target, &st) != 0) return errno;
  unsigned long flags = MS_REMOUNT | MS_BIND;
  const unsigned long have = static_cast<unsigned long>(st.f_flags);
  constexpr struct {
    unsigned long st;
    unsigned long ms;
  } kKept[] = {{ST_RDONLY, MS_RDONLY},    {ST_NOSUID, MS_NOSUID},   {ST_NODEV, MS_NODEV},
               {ST_NOEXEC, MS_NOEXEC},    {ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME},
               {ST_RELATIME, MS_RELATIME}};
  for (const auto& k : kKept) {
    if (have & k.st) flags |= k.ms;
  }
  if (attr & MOUNT_ATTR_RDONLY) flags |= MS_RDONLY;
  if (attr & MOUNT_ATTR_NOSUID) flags |= MS_NOSUID;
  if (attr & MOUNT_ATTR_NODEV) flags |= MS_NODEV;
  if (attr & MOUNT_ATTR_NOEXEC) flags |= MS_NOEXEC;
  return ::mount(nullptr, target, nullptr, flags, nullptr) == 0 ? 0 : errno;
}

int SetAttr(const char* target, uint64_t attr, unsigned flags) {
  struct mount_attr a {};
  a.attr_set = attr;
  if (::syscall(SYS_mount_setattr, AT_FDCWD, target, flags, &a, sizeof a) == 0) return 0;
  // The mounts beneath a tree are remounted by steps of their own.
  return errno == ENOSYS ? Remount(target, attr) : errno;
}

// The mount points strictly beneath `path` in this process's mount
// namespace (/proc/self/mountinfo, octal escapes undone), for remounting
// them one by one where there is no mount_setattr.
std::vector<std::string> MountsBeneath(const std::string& path) {
  std::vector<std::string> beneath;
  auto info = sys::ReadFile("/proc/self/mountinfo", 16 << 20);
  if (!info) return beneath;
  size_t pos = 0;
  while (pos < info->size()) {
    size_t end = info->find('\n', pos);
    if (end == std::string::npos) end = info->size();
    std::string line = info->substr(pos, end - pos);
    pos = end + 1;
    // id parent major:minor root mount-point ...
    size_t field = 0, at = 0;
    for (; field < 4 && at != std::string::npos; ++field) {
      at = line.find(' ', at);
      if (at != std::string::npos) ++at;
    }
    if (at == std::string::npos) continue;
    std::string escaped = line.substr(at, line.find(' ', at) - at), point;
    for (size_t i = 0; i < escaped.size(); ++i) {
      if (escaped[i] == '\\' && i + 3 < escaped.size()) {
        point.push_back(
            static_cast<char>(std::strtol(escaped.substr(i + 1, 3).c_str(), nullptr, 8)));
        i += 3;
      } else {
        point.push_back(escaped[i]);
      }
    }
    const std::string prefix = path == "/" ? "/" : path + "/";
    if (point.size() > prefix.size() && point.starts_with(prefix)) beneath.push_back(point);
  }
  std::sort(beneath.begin(), beneath.end());
  beneath.erase(std::unique(beneath.begin(), beneath.end()), beneath.end());
  return beneath;
}

// Opens the absolute `path` (no "." or ".." segments: the spec refuses
// them) O_PATH, one component at a time from the root, following no
// symbolic link (mounts are crossed as usual). Returns a descriptor, or
// -errno: ENOTDIR or ELOOP where a link is. Async-signal-safe.
int OpenNoSymlinks(const char* path, size_t length) {
  int dir = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -errno;
  size_t at = 0;
  char name[NAME_MAX + 1];
  while (at < length) {
    while (at < length && path[at] == '/') ++at;
    if (at == length) break;
    size_t n = 0;
    while (at + n < length && path[at + n] != '/') ++n;
    if (n > NAME_MAX) {
      ::close(dir);
      return -ENAMETOOLONG;
    }
    std::memcpy(name, path + at, n);
    name[n] = '\0';
    at += n;
    bool last = at == length;
    int next = ::openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC | (last ? 0 : O_DIRECTORY));
    int err = errno;
    ::close(dir);
    if (next < 0) return -err;
    dir = next;
  }
  struct stat st {};
  if (::fstat(dir, &st) != 0 || S_ISLNK(st.st_mode)) {
    ::close(dir);
    return -ELOOP;  // O_PATH | O_NOFOLLOW opened the link itself
  }
  return dir;
}

// The parent of `target` opened as above; `*name` is set to its last
// component.
int OpenParentNoSymlinks(const char* target, const char** name) {
  size_t length = std::strlen(target);
  size_t slash = length;
  while (slash > 0 && target[slash - 1] != '/') --slash;
  *name = target + slash;
  return OpenNoSymlinks(target, slash);
}

// kBind and kAttach beneath a writable mount: the tree (`tree`, or a
// detached copy of `source` made here: this process may clone mounts in
// its own namespace) is moved onto the target's descriptor, never onto a
// path that could be swapped between the lookup and the mount.
int AttachNoSymlinks(const MountStep& s) {
  int target = OpenNoSymlinks(s.target, std::strlen(s.target));
  if (target < 0) return -target;
  int tree = s.fd;
  uint64_t attr = s.attr;
  if (s.op == MountStep::Op::kBind) {
    tree = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, s.source,
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (tree < 0) {
      int err = errno;
      ::close(target);
      return err;
    }
    struct mount_attr a {};
    a.attr_set = attr;
    if (attr != 0 &&
        ::syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) == 0) {
      attr = 0;  // else (ENOSYS) remounted below
    }
  }
  int err = ::syscall(SYS_move_mount, tree, "", target, "",
                      MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0
                ? 0
                : errno;
  if (tree != s.fd) ::close(tree);
  ::close(target);
  if (err != 0) return err;
  return attr == 0 ? 0 : SetAttr(s.target, attr, AT_RECURSIVE);
}

int RunStep(const MountStep& s) {
  const bool no_symlinks = (s.flags & kNoSymlinks) != 0;
  switch (s.op) {
    case MountStep::Op::kMkdir: {
      if (!no_symlinks) return ::mkdir(s.target, s.mode) == 0 || errno == EEXIST ? 0 : errno;
      const char* name = nullptr;
      int parent = OpenParentNoSymlinks(s.target, &name);
      if (parent < 0) return -parent;
      int err = ::mkdirat(parent, name, s.mode) == 0 || errno == EEXIST ? 0 : errno;
      ::close(parent);
      return err;
    }
    case MountStep::Op::kFile: {
      int parent = AT_FDCWD;
      const char* name = s.target;
      if (no_symlinks && (parent = OpenParentNoSymlinks(s.target, &name)) < 0) return -parent;
      int fd = ::openat(parent, name, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, s.mode);
      int err = fd < 0 ? errno : 0;
      if (fd >= 0) ::close(fd);
      if (parent >= 0) ::close(parent);
      return err;
    }
    case MountStep::Op::kSymlink:
      return ::symlink(s.source, s.target) == 0 || errno == EEXIST ? 0 : errno;
    case MountStep::Op::kBind:
      if (no_symlinks) return AttachNoSymlinks(s);
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
      if (no_symlinks) return AttachNoSymlinks(s);
      if (::syscall(SYS_move_mount, s.fd, "", AT_FDCWD, s.target, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        return errno;
      }
      return s.attr == 0 ? 0 : SetAttr(s.target, s.attr, AT_RECURSIVE);
    case MountStep::Op::kRemount:
      return Remount(s.target, s.attr);
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
  if (op == MountStep::Op::kMkdir || op == MountStep::Op::kFile || op == MountStep::Op::kBind ||
      op == MountStep::Op::kAttach) {
    bool beneath_writable = std::any_of(writable_.begin(), writable_.end(),
                                        [&](const auto& w) { return target.starts_with(w + "/"); });
    if (beneath_writable) flags |= kNoSymlinks;
  }
  steps_.push_back(
      MountStep{op, source.empty() ? nullptr : Keep(source), Keep(target), flags, attr, mode, fd});
}

bool HasMountSetattr() {
  // EBADF for the bad descriptor where it exists, ENOSYS where it does not.
  static const bool has =
      ::syscall(SYS_mount_setattr, -1, "", AT_EMPTY_PATH, nullptr, 0) != 0 && errno != ENOSYS;
  return has;
}

sys::Result<void> MountPlan::AddTree(const std::string& source, const std::string& target,
                                     uint64_t attr, bool recursive) {
  unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0);
  int fd = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, source.c_str(), flags));
  if (fd < 0 && (errno == EPERM || errno == ENOSYS)) {
    // A supervisor without CAP_SYS_ADMIN over its mount namespace (an
    // unprivileged caller) may not clone mounts: the child binds the path
    // from the host's root. Its sandbox is mapped to the caller's own ids,
    // so it reaches there exactly what the caller reaches.
    Add(MountStep::Op::kBind, std::string(kOldRoot) + source, target, 0, attr);
    return {};
  }
  if (fd < 0) {
    int err = errno;
    std::string call = std::string("open_tree(\"") + source + "\", OPEN_TREE_CLONE" +
                       (recursive ? " | AT_RECURSIVE" : "") + ")";
    return std::unexpected(sys::Error(call, err).Context("bind " + source + " at " + target));
  }
  trees_.emplace_back(fd);
  uint64_t left = 0;  // what the child sets, once attached
  if (attr != 0) {
    struct mount_attr a {};
    a.attr_set = attr;
    if (::syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &a,
                  sizeof a) != 0) {
      if (errno != ENOSYS) {
        return std::unexpected(
            sys::Error::FromErrno("mount_setattr").Context("bind " + source + " at " + target));
      }
      left = attr;
    }
  }
  Add(MountStep::Op::kAttach, source, target, 0, left, 0, fd);
  if (left != 0 && recursive) {
    // No mount_setattr: each mount beneath gets the attributes by a remount
    // of its own, at its place under the target.
    for (const std::string& below : MountsBeneath(source)) {
      Add(MountStep::Op::kRemount, "", target + below.substr(source == "/" ? 0 : source.size()), 0,
          left);
    }
  }
  return {};
}

void MountPlan::EnsureDir(const std::string& path, uint32_t mode) {
  if (path == "/" || std::find(made_dirs_.begin(), made_dirs_.end(), path) != made_dirs_.end()) {
    return;
  }
  EnsureDir(Parent(path));
  made_dirs_.push_back(path);
  Add(MountStep::Op::kMkdir, "", path, 0, 0, mode);
}

sys::Result<MountPlan> MountPlan::Build(const MountRequest& r) {
  MountPlan plan;
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
      CORDON_RETURN_IF_ERROR(plan.AddTree(dir, dir, kReadOnly, true));
      plan.read_only_.push_back(dir);
    }
  }
  // The cover (kCover), made once, before the first step that binds it.
  bool cover_made = false;
  auto cover = [&](const std::string& path) {
    if (!cover_made) {
      cover_made = true;
      plan.EnsureDir(kCoverDir);
      plan.Add(MountStep::Op::kTmpfs, "size=4k,nr_inodes=2,mode=0755", kCoverDir,
               MS_NOSUID | MS_NODEV | MS_NOEXEC);
      plan.Add(MountStep::Op::kFile, "", kCover, 0, 0, 0444);
      // The whole tmpfs read-only: no mount of it can be made writable.
      plan.Add(MountStep::Op::kTmpfs, "", kCoverDir,
               MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
    }
    plan.Add(MountStep::Op::kBind, kCover, path, 0, kReadOnly | MOUNT_ATTR_NOEXEC);
  };
  // Secrets beneath them: a file is covered by cordon's own empty file (it
  // reads as empty and cannot be written), a directory by an empty
  // read-only tmpfs.
  for (const auto& path : r.hidden_paths) {
    bool visible = std::any_of(plan.read_only_.begin(), plan.read_only_.end(),
                               [&](const std::string& d) { return path.starts_with(d + "/"); });
    struct stat st {};
    if (!visible || ::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode)) {
      cover(path);
    } else if (S_ISDIR(st.st_mode)) {
      plan.Add(MountStep::Op::kTmpfs, "size=4k,nr_inodes=1,mode=000", path,
               MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
    }
  }

  // Inodes are bounded as well as bytes: without nr_inodes a tmpfs allows
  // millions of empty files, bounded only by kernel memory (issue 13, case
  // 27). One inode per 4 KiB page of the cap (any file with data takes a
  // page anyway), and never fewer than 1024.
  const std::string tmp_bounds = "size=" + std::to_string(r.tmp_size_bytes) + ",nr_inodes=" +
                                 std::to_string(std::max<int64_t>(1024, r.tmp_size_bytes / 4096));
  std::string tmp_options = tmp_bounds + ",mode=1777";
  plan.EnsureDir("/tmp");
  plan.Add(MountStep::Op::kTmpfs, tmp_options, "/tmp", MS_NOSUID | MS_NODEV);
  plan.writable_.push_back("/tmp");

  plan.EnsureDir("/proc");
  plan.Add(MountStep::Op::kProc, "", "/proc");
  // The new procfs has what the host's has (one kernel).
  for (const char* name : kProcMasks) {
    std::string path = std::string("/proc/") + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) cover(path);
  }

  // /dev: a small tmpfs (noexec; /dev/shm lives on it) with the host's
  // device nodes bound in, a private devpts, and the usual links. /dev/fd
  // matters beyond habit: verified files are executed through it.
  plan.EnsureDir("/dev");
  plan.Add(MountStep::Op::kTmpfs, tmp_bounds + ",mode=0755", "/dev", MS_NOSUID | MS_NOEXEC);
  for (const char* dev : kDevices) {
    std::string target = std::string("/dev/") + dev;
    plan.Add(MountStep::Op::kFile, "", target, 0, 0, 0444);
    // As the host has them: nosuid and noexec mean nothing for a device.
    CORDON_RETURN_IF_ERROR(plan.AddTree(target, target, 0, false));
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
  if (!r.workspace_tmpfs.empty()) {
    plan.Add(MountStep::Op::kTmpfs, r.workspace_tmpfs, kSandboxWorkspace, MS_NOSUID | MS_NODEV);
  } else if (r.workspace_tree >= 0) {
    // Its attributes were set with its idmapping (or it is a plain copy).
    plan.Add(MountStep::Op::kAttach, r.workspace, kSandboxWorkspace, 0,
             HasMountSetattr() ? 0 : kWritable, 0, r.workspace_tree);
  } else {
    CORDON_RETURN_IF_ERROR(plan.AddTree(r.workspace, kSandboxWorkspace, kWritable, true));
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
    CORDON_RETURN_IF_ERROR(
        plan.AddTree(b.source, b.target, b.writable ? kWritable : kReadOnly, true));
    (b.writable ? plan.writable_ : plan.read_only_).push_back(b.target);
  }
  return plan;
}

std::string MountPlan::Describe(size_t index) const {
  if (index >= steps_.size()) return "the new root";
  const MountStep& s = steps_[index];
  static constexpr const char* kNames[] = {"mkdir", "create", "symlink", "bind",   "tmpfs",
                                           "proc",  "devpts", "bind",    "remount"};
  std::string what = kNames[static_cast<int>(s.op)];
  if (s.op == MountStep::Op::kBind && s.source && std::string(s.source) == kCover) {
    return std::string("cover ") + s.target;
  }
  if ((s.op == MountStep::Op::kBind || s.op == MountStep::Op::kAttach) && s.source) {
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
  // The cover's own tmpfs leaves the view (the covers keep it alive).
  if (::umount2(kCoverDir, MNT_DETACH) == 0) {
    if (::rmdir(kCoverDir) != 0) return fail(errno);
  } else if (errno != ENOENT) {
    return fail(errno);
  }
  // Nothing of the host stays reachable: detach its root, then freeze ours.
  if (::umount2(kOldRoot, MNT_DETACH) != 0) return fail(errno);
  if (::rmdir(kOldRoot) != 0) return fail(errno);
  if (int err = SetAttr("/", kReadOnly | MOUNT_ATTR_NOEXEC, 0); err != 0) return fail(err);
  ::umask(saved_umask);
  return 0;
}

}  // namespace cordon::contain
