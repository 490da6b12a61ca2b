#include "contain/disk.h"

// <linux/fs.h> (FS_IOC_FSGETXATTR) before <sys/mount.h>: glibc's header
// gives way to the kernel's mount flags, not the other way round.
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/quota.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "contain/namespaces.h"
#include "contain/probe.h"
#include "sys/fd.h"
#include "sys/random.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443  // Linux 5.14; glibc 2.36 has no wrapper
#endif
#ifndef STATX_ATTR_MOUNT_ROOT
#define STATX_ATTR_MOUNT_ROOT 0x00002000  // Linux 5.8
#endif

namespace cordon::contain {
namespace {

constexpr const char* kMkfs = "/sbin/mkfs.ext4";
constexpr size_t kTemplates = 8;  // formatted images kept, one per size
constexpr int kLoopMajor = 7;

constexpr const char* kDiskFix =
    "put the state directory on XFS mounted with prjquota, or on ext4 with the project and "
    "quota features mounted with prjquota; or run cordon serve as root where loop devices "
    "(/dev/loop-control) and /sbin/mkfs.ext4 are available";

// cordon's project ids: high, far from the small ones administrators give
// projects in /etc/projid. A workspace's id is found from a hash of its
// path and claimed by setting its limits; an id is free while nothing is
// charged to it (a bounded workspace always is: its directory is an inode
// of the project). Two daemons on one filesystem that claimed the same id
// at the same instant would share one quota: a tighter bound, never a
// looser one.
constexpr uint32_t kProjectBase = 0x70000000;
constexpr uint32_t kProjectSlots = 1u << 24;
constexpr int kProjectProbes = 64;

bool OurProject(uint32_t id) { return id >= kProjectBase && id - kProjectBase < kProjectSlots; }

CapabilityStatus Enforced(std::string mechanism) {
  return CapabilityStatus{Capability::kDisk, true, std::move(mechanism), "", ""};
}

CapabilityStatus Unavailable(std::string reason, std::string fix, std::string fallback = "") {
  return CapabilityStatus{Capability::kDisk, false, std::move(fallback), std::move(reason),
                          std::move(fix)};
}

std::string FilesystemName(int64_t type) {
  switch (static_cast<uint64_t>(type)) {
    case EXT4_SUPER_MAGIC:  // also ext2 and ext3
      return "ext4";
    case XFS_SUPER_MAGIC:
      return "xfs";
    case TMPFS_MAGIC:
      return "tmpfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlayfs";
    case NFS_SUPER_MAGIC:
      return "nfs";
    case 0x2fc12fc1:  // ZFS
      return "zfs";
    case 0x01021997:  // V9FS_MAGIC
      return "9p";
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(type));
  return hex;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

uint32_t Fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// --- Observations of one directory. ---

// Whether `fd` is the root of a mount: its own filesystem, or a bind.
bool IsMountRoot(int fd) {
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &stx) == 0 &&
      (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)) {
    return (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  }
  // Before Linux 5.8: a filesystem of its own has a device of its own.
  struct stat self {
  }, parent{};
  return ::fstat(fd, &self) == 0 && ::fstatat(fd, "..", &parent, 0) == 0 &&
         self.st_dev != parent.st_dev;
}

bool IsEmptyDir(int fd) {
  sys::UniqueFd copy(::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!copy) return false;
  DIR* d = ::fdopendir(copy.release());
  if (!d) return false;
  bool empty = true;
  while (const struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

sys::Result<struct fsxattr> GetFsx(int fd, const std::string& dir) {
  struct fsxattr fsx {};
  if (::ioctl(fd, FS_IOC_FSGETXATTR, &fsx) != 0) {
    return sys::FailErrno("ioctl(\"" + dir + "\", FS_IOC_FSGETXATTR)");
  }
  return fsx;
}

// --- Project quotas (quotactl_fd(2) on any descriptor of the filesystem). ---

long QuotactlFd(int fd, int cmd, uint32_t id, void* addr) {
  return ::syscall(SYS_quotactl_fd, fd, static_cast<unsigned>(QCMD(cmd, PRJQUOTA)), id, addr);
}

// Accounting and enforcement of project quotas on the filesystem of `fd`.
sys::Result<void> ProjectQuotasOn(int fd, const std::string& where) {
  struct fs_quota_stat qs {};
  if (QuotactlFd(fd, Q_XGETQSTAT, 0, &qs) != 0) {
    int err = errno;
    // ENOSYS: no such system call, or no quota support in the filesystem
    // (a bad descriptor tells the two apart).
    if (err == ENOSYS && QuotactlFd(-1, Q_XGETQSTAT, 0, &qs) != 0 && errno == ENOSYS) {
      return sys::Fail("this kernel has no quotactl_fd (Linux 5.14 adds it)", err);
    }
    if (err == ENOSYS || err == ENOTTY || err == EOPNOTSUPP) {
      struct statfs fs {};
      std::string name = ::fstatfs(fd, &fs) == 0 ? FilesystemName(fs.f_type) : "?";
      return sys::Fail("the filesystem of " + where + " (" + name + ") has no project quotas", err);
    }
    return sys::Fail("quotactl_fd(" + where + ", Q_XGETQSTAT, PRJQUOTA)", err);
  }
  if (!(qs.qs_flags & FS_QUOTA_PDQ_ACCT)) {
    return sys::Fail("project quotas are off on the filesystem of " + where, ESRCH);
  }
  if (!(qs.qs_flags & FS_QUOTA_PDQ_ENFD)) {
    return sys::Fail("project quotas are counted but not enforced on the filesystem of " + where,
                     ESRCH);
  }
  return {};
}

// The quota record of project `id`; all zero when it has none.
sys::Result<struct if_dqblk> GetProject(int fd, uint32_t id) {
  struct if_dqblk q {};
  if (QuotactlFd(fd, Q_GETQUOTA, id, &q) != 0) {
    if (errno == ENOENT) return if_dqblk{};  // XFS: no record yet
    return sys::FailErrno("quotactl_fd(Q_GETQUOTA, PRJQUOTA, " + std::to_string(id) + ")");
  }
  return q;
}

sys::Result<void> SetProjectLimits(int fd, uint32_t id, const DiskLimits& limits) {
  struct if_dqblk q {};
  // 1 KiB blocks (QIF_DQBLKSIZE), rounded up: never below what was asked.
  q.dqb_bhardlimit = limits.bytes ? (static_cast<uint64_t>(*limits.bytes) + 1023) / 1024 : 0;
  q.dqb_ihardlimit = limits.inodes ? static_cast<uint64_t>(*limits.inodes) : 0;
  q.dqb_valid = QIF_LIMITS;
  if (QuotactlFd(fd, Q_SETQUOTA, id, &q) != 0) {
    return sys::FailErrno("quotactl_fd(Q_SETQUOTA, PRJQUOTA, " + std::to_string(id) + ")");
  }
  return {};
}

// Held while a project id is claimed or released: the daemon releases a
// run's workspace on a worker thread (api/runs.cc) while its loop claims
// the next, and a release that saw an id unused must not clear the limits a
// claim has just set on it. (Between processes nothing changes: two
// claims whose paths hash near each other can still race, as before.)
std::mutex& ProjectsMutex() {
  static std::mutex mutex;
  return mutex;
}

// A free project id (nothing charged to it), claimed with `limits`.
sys::Result<uint32_t> ClaimProject(int fd, const std::string& dir, const DiskLimits& limits) {
  const uint32_t h = Fnv1a(dir);
  for (int i = 0; i < kProjectProbes; ++i) {
    uint32_t id = kProjectBase + (h + static_cast<uint32_t>(i)) % kProjectSlots;
    CORDON_ASSIGN_OR_RETURN(struct if_dqblk q, GetProject(fd, id));
    if (q.dqb_curinodes != 0 || q.dqb_curspace != 0) continue;
    CORDON_RETURN_IF_ERROR(SetProjectLimits(fd, id, limits));
    return id;
  }
  return sys::Fail("no free project id near " + std::to_string(kProjectBase + h % kProjectSlots) +
                       " after " + std::to_string(kProjectProbes) + " tries",
                   EAGAIN);
}

// The workspace gets a project of its own: everything made beneath it
// inherits the id (FS_XFLAG_PROJINHERIT) and is charged to it. ext4 lets a
// process with CAP_SYS_RESOURCE in the initial user namespace write past a
// quota; a sandbox with isolation is unprivileged there (its root is root
// of its own user namespace only), so the quota binds it. XFS binds root
// too.
sys::Result<void> BoundByQuota(int fd, const std::string& dir, const DiskLimits& limits) {
  std::lock_guard lock(ProjectsMutex());
  CORDON_ASSIGN_OR_RETURN(uint32_t id, ClaimProject(fd, dir, limits));
  auto set = [&]() -> sys::Result<void> {
    CORDON_ASSIGN_OR_RETURN(struct fsxattr fsx, GetFsx(fd, dir));
    fsx.fsx_projid = id;
    fsx.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    if (::ioctl(fd, FS_IOC_FSSETXATTR, &fsx) != 0) {
      return sys::FailErrno("ioctl(\"" + dir + "\", FS_IOC_FSSETXATTR, projid " +
                            std::to_string(id) + ")");
    }
    return {};
  }();
  if (!set) (void)SetProjectLimits(fd, id, {});
  return set;
}

// --- tmpfs. ---

sys::Result<void> MountTmpfs(const std::string& dir, const struct stat& owner,
                             const DiskLimits& limits) {
  const std::string options = "mode=0700,uid=" + std::to_string(owner.st_uid) +
                              ",gid=" + std::to_string(owner.st_gid) + TmpfsLimitOptions(limits);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return sys::FailErrno("mount(\"tmpfs\", \"" + dir + "\", \"" + options + "\")");
  }
  return {};
}

// --- Loop images. ---

// The inodes an image gets: what was asked, but no more than one per 4 KiB
// (an inode table bigger than that would eat the space it bounds, and
// mkfs refuses more inodes than blocks). 0: mkfs's default ratio.
int64_t ImageInodes(int64_t bytes, const std::optional<int64_t>& inodes) {
  if (!inodes) return 0;
  return std::max<int64_t>(16, std::min(*inodes, bytes / 4096));
}

// Runs mkfs.ext4 with an exact environment and no descriptor of ours but
// a pipe for its stderr; waits for it.
sys::Result<void> RunMkfs(const std::string& image, int64_t inodes) {
  std::vector<std::string> args = {
      kMkfs, "-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard", "-m", "0"};
  if (inodes > 0) {
    args.push_back("-N");
    args.push_back(std::to_string(inodes));
  }
  args.push_back(image);
  std::string command;
  for (const auto& a : args) command += (command.empty() ? "" : " ") + a;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char lang_env[] = "LC_ALL=C";
  char* envp[] = {path_env, lang_env, nullptr};

  CORDON_ASSIGN_OR_RETURN(sys::PipeFds err, sys::MakePipe());
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, err.write.get(), 2);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  // The daemon ignores SIGPIPE and may block signals: none of it is mkfs's.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, kMkfs, &actions, &attr, argv.data(), envp);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  err.write.reset();
  if (rc != 0) return sys::Fail("posix_spawn(\"" + command + "\")", rc);
  auto text = sys::ReadAll(err.read.get(), 64 << 10);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return sys::FailErrno("waitpid(" + command + ")");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  std::string said = text ? *text : "";
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WTERMSIG(status));
  return sys::Fail("\"" + command + "\" failed (" + how + ")" + (said.empty() ? "" : ": " + said),
                   EIO);
}

// Copies the data of `from` (a sparse file) into the empty `to`, keeping
// the holes: an image of 10 GiB holds about 4 MiB of metadata.
sys::Result<void> CopySparse(int from, int to, off_t size) {
  std::vector<char> buf;
  off_t pos = 0;
  while (pos < size) {
    off_t data = ::lseek(from, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    if (data < 0) return sys::FailErrno("lseek(SEEK_DATA)");
    off_t hole = ::lseek(from, data, SEEK_HOLE);
    if (hole < 0) return sys::FailErrno("lseek(SEEK_HOLE)");
    off_t in = data, out = data;
    while (in < hole) {
      ssize_t n = ::copy_file_range(from, &in, to, &out, static_cast<size_t>(hole - in), 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
        return sys::FailErrno("copy_file_range");
      }
      // No in-kernel copy between these files: by hand.
      if (buf.empty()) buf.resize(1 << 20);
      ssize_t r = ::pread(from, buf.data(), std::min<off_t>(buf.size(), hole - in), in);
      if (r <= 0) return sys::FailErrno("pread");
      if (::pwrite(to, buf.data(), static_cast<size_t>(r), out) != r) {
        return sys::FailErrno("pwrite");
      }
      in += r;
      out += r;
    }
    pos = hole;
  }
  if (::ftruncate(to, size) != 0) return sys::FailErrno("ftruncate");
  return {};
}

// Keeps at most kTemplates - 1 templates in `dir`, the least recently used
// going first: tenants asking for many sizes must not fill the state dir.
void TrimTemplates(const std::string& dir) {
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    auto when = e.last_write_time(ec);
    if (!ec) found.emplace_back(when, e.path());
  }
  std::sort(found.begin(), found.end());
  for (size_t i = 0; i + kTemplates - 1 < found.size(); ++i) {
    std::filesystem::remove(found[i].second, ec);
  }
}

// A formatted image for (bytes, inodes), made once per state directory and
// copied for each workspace: a copy of its few MiB takes a few ms, mkfs
// tens (ext4 does not mind that copies share a UUID).
sys::Result<std::string> Template(const std::string& state_dir, int64_t bytes, int64_t inodes) {
  const std::string dir = state_dir + "/images";
  const std::string path =
      dir + "/ext4-" + std::to_string(bytes) + "-" + std::to_string(inodes) + ".img";
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return path;  // used: now
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return sys::FailErrno("mkdir(\"" + dir + "\")");
  }
  // An image is only cheap where files keep their holes. ramfs keeps every
  // page of a file in memory and reports no holes: a 10 GiB image there was
  // seen to hold 10 GiB of the host's RAM, and each copy as much again.
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type == RAMFS_MAGIC) {
    return sys::Fail("the state directory is on ramfs, which keeps no sparse files: an image of " +
                         std::to_string(bytes) + " bytes would take as much memory",
                     EOPNOTSUPP);
  }
  TrimTemplates(dir);
  const std::string temp = path + ".tmp-" + sys::RandomHex(4);
  auto made = [&]() -> sys::Result<void> {
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                            sys::Open(temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (::ftruncate(fd.get(), bytes) != 0) {
      return sys::FailErrno("ftruncate(\"" + temp + "\", " + std::to_string(bytes) + ")");
    }
    CORDON_RETURN_IF_ERROR(RunMkfs(temp, inodes));
    // Any other filesystem without holes: the formatted image must be
    // mostly unallocated, or every workspace would cost its whole size.
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return sys::FailErrno("fstat(\"" + temp + "\")");
    if (st.st_blocks * 512 > bytes / 2 && bytes > (int64_t{64} << 20)) {
      return sys::Fail(
          "the state directory's filesystem keeps no holes in files (a formatted "
          "image of " +
              std::to_string(bytes) + " bytes holds " + std::to_string(st.st_blocks * 512) +
              "): images would cost their size",
          EOPNOTSUPP);
    }
    fd.reset();
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      return sys::FailErrno("rename(\"" + temp + "\", \"" + path + "\")");
    }
    return {};
  }();
  if (!made) {
    ::unlink(temp.c_str());
    return std::unexpected(made.error());
  }
  return path;
}

sys::Result<void> MakeImage(const DiskSupport& support, const std::string& image,
                            const DiskLimits& limits) {
  int64_t bytes = 0;
  if (limits.bytes) {
    bytes = *limits.bytes;
  } else {
    // Only inodes were asked for: as many bytes as the host's filesystem.
    struct statfs fs {};
    if (::statfs(support.state_dir.c_str(), &fs) != 0) {
      return sys::FailErrno("statfs(\"" + support.state_dir + "\")");
    }
    bytes = static_cast<int64_t>(fs.f_blocks) * fs.f_bsize;
  }
  CORDON_ASSIGN_OR_RETURN(std::string from,
                          Template(support.state_dir, bytes, ImageInodes(bytes, limits.inodes)));
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd in, sys::Open(from, O_RDONLY));
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd out,
                          sys::Open(image, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
  if (auto copied = CopySparse(in.get(), out.get(), bytes); !copied) {
    ::unlink(image.c_str());
    return std::unexpected(copied.error().Context("copy " + from + " to " + image));
  }
  return {};
}

// Attaches `image` to a free loop device (freed by the kernel once its
// last user, the mount, is gone) and mounts it at `dir`.
sys::Result<void> MountImage(const std::string& image, const std::string& dir) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd file, sys::Open(image, O_RDWR | O_NOFOLLOW));
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd control, sys::Open("/dev/loop-control", O_RDWR));
  sys::UniqueFd loop;
  std::string device;
  for (int attempt = 0;; ++attempt) {
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return sys::FailErrno("ioctl(\"/dev/loop-control\", LOOP_CTL_GET_FREE)");
    device = "/dev/loop" + std::to_string(n);
    CORDON_ASSIGN_OR_RETURN(loop, sys::Open(device, O_RDWR));
    struct loop_config config {};
    config.fd = static_cast<uint32_t>(file.get());
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(),
                 LO_NAME_SIZE - 1);
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) break;
    // Another process took the device between the two calls: the next one.
    if (errno != EBUSY || attempt == 16) {
      return sys::FailErrno("ioctl(\"" + device + "\", LOOP_CONFIGURE, \"" + image + "\")");
    }
  }
  // noinit_itable: the inode tables mkfs left unwritten stay so (the kernel
  // knows which are unused) instead of being zeroed in the background, which
  // would write 256 bytes per inode into the image.
  if (::mount(device.c_str(), dir.c_str(), "ext4", MS_NOSUID | MS_NODEV, "noinit_itable") != 0) {
    return sys::FailErrno("mount(\"" + device + "\" (" + image + "), \"" + dir + "\", ext4)");
  }
  return {};  // closing `loop` leaves the mount as its only user
}

// The root of a fresh image becomes what the workspace directory was: its
// owner, mode 0700, nothing in it (mkfs made lost+found).
sys::Result<void> AdoptRoot(const std::string& dir, const struct stat& owner) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd root, sys::Open(dir, O_RDONLY | O_DIRECTORY));
  if (::fchown(root.get(), owner.st_uid, owner.st_gid) != 0 || ::fchmod(root.get(), 0700) != 0) {
    return sys::FailErrno("chown/chmod of the image's root at " + dir);
  }
  (void)::unlinkat(root.get(), "lost+found", AT_REMOVEDIR);
  return {};
}

// Allocates what `image` does not hold yet (unwritten extents: nothing is
// zeroed), so that writing into it needs no more of the state directory's
// filesystem.
sys::Result<void> ReserveImage(const std::string& image) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(image, O_RDWR | O_NOFOLLOW));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys::FailErrno("fstat(\"" + image + "\")");
  // (Read before: a fallocate that fails may have taken what there was.)
  struct statvfs fs {};
  const std::string free =
      ::fstatvfs(fd.get(), &fs) == 0
          ? std::to_string(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize) + " bytes free"
          : "room unknown";
  if (::fallocate(fd.get(), 0, 0, st.st_size) == 0) return {};
  const int err = errno;
  return sys::Fail("cannot reserve the " + std::to_string(st.st_size) + " bytes of " + image +
                       " (--reserve-disk; the state directory's filesystem had " + free +
                       "): fallocate",
                   err);
}

sys::Result<void> BoundByImage(const DiskSupport& support, const std::string& dir,
                               const struct stat& owner, const DiskLimits& limits) {
  const std::string image = dir + ".img";
  CORDON_RETURN_IF_ERROR(MakeImage(support, image, limits));
  auto mounted = [&]() -> sys::Result<void> {
    if (support.reserve_images) CORDON_RETURN_IF_ERROR(ReserveImage(image));
    CORDON_RETURN_IF_ERROR(MountImage(image, dir));
    if (auto adopted = AdoptRoot(dir, owner); !adopted) {
      (void)::umount2(dir.c_str(), MNT_DETACH);
      return adopted;
    }
    return {};
  }();
  if (!mounted) ::unlink(image.c_str());
  return mounted;
}

// --- What the host offers, tried on scratch directories. ---

// Whether the filesystem of `state_fd` reserves a file's space
// (fallocate), on an unnamed file that goes with its descriptor.
sys::Result<void> TryReserve(int state_fd) {
  int fd = ::openat(state_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return sys::FailErrno("open(O_TMPFILE) in the state directory");
  sys::UniqueFd file(fd);
  if (::fallocate(file.get(), 0, 0, 1 << 20) != 0) {
    return sys::FailErrno(
        "the state directory's filesystem cannot reserve a file's space: "
        "fallocate");
  }
  return {};
}

std::string ScratchProbeDir(const std::string& state_dir) {
  return state_dir + "/.disk-probe-" + sys::RandomHex(6);
}

sys::Result<void> TryProjectQuota(int state_fd, const std::string& state_dir) {
  CORDON_RETURN_IF_ERROR(ProjectQuotasOn(state_fd, state_dir));
  const std::string dir = ScratchProbeDir(state_dir);
  if (::mkdir(dir.c_str(), 0700) != 0) return sys::FailErrno("mkdir(\"" + dir + "\")");
  auto tried = [&]() -> sys::Result<void> {
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(dir, O_RDONLY | O_DIRECTORY));
    const DiskLimits limits{1 << 20, 16};
    CORDON_RETURN_IF_ERROR(BoundByQuota(fd.get(), dir, limits));
    CORDON_ASSIGN_OR_RETURN(std::string mechanism, ObserveBound(dir, limits));
    (void)mechanism;
    return {};
  }();
  (void)RemoveBoundWorkspace(dir);
  return tried;
}

sys::Result<void> TryTmpfs(const std::string& state_dir) {
  const std::string dir = ScratchProbeDir(state_dir);
  if (::mkdir(dir.c_str(), 0700) != 0) return sys::FailErrno("mkdir(\"" + dir + "\")");
  auto tried = [&]() -> sys::Result<void> {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return sys::FailErrno("stat(\"" + dir + "\")");
    CORDON_RETURN_IF_ERROR(MountTmpfs(dir, st, DiskLimits{64 << 10, 16}));
    // A sandbox reaches its workspace through an idmapped mount (sandbox.cc)
    // where it has an id of its own; tmpfs takes one from Linux 6.3. Where
    // no user namespace can be made there is no idmapping to need.
    auto userns = MakeUserNamespace(0, 65534, 0, 65534);
    if (!userns) return {};
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd tree, DetachedTree(dir));
    if (auto idmapped = IdmapTree(tree.get(), userns->get()); !idmapped) {
      return sys::Fail(
          "a tmpfs cannot be idmapped on this kernel (Linux 6.3 can), so a sandbox could not "
          "write to it: " +
              idmapped.error().what(),
          idmapped.error().errno_value());
    }
    return {};
  }();
  (void)RemoveBoundWorkspace(dir);
  return tried;
}

bool HasCapSysAdmin() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32))) != 0;
}

sys::Result<void> CheckLoopImages() {
  if (::access(kMkfs, X_OK) != 0) {
    return sys::Fail(std::string(kMkfs) + " is missing (install e2fsprogs)", errno);
  }
  auto filesystems = sys::ReadFile("/proc/filesystems", 1 << 16);
  if (filesystems && filesystems->find("\text4\n") == std::string::npos) {
    return sys::Fail("this kernel has no ext4", ENODEV);
  }
  // ext4 is mounted only by CAP_SYS_ADMIN in the initial user namespace.
  auto map = sys::ReadFile("/proc/self/uid_map", 4096);
  if (!HasCapSysAdmin() || (map && map->find("4294967295") == std::string::npos)) {
    return sys::Fail("mounting an image needs root (CAP_SYS_ADMIN in the initial user namespace)",
                     EPERM);
  }
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd control, sys::Open("/dev/loop-control", O_RDWR));
  int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
  if (n < 0) return sys::FailErrno("ioctl(\"/dev/loop-control\", LOOP_CTL_GET_FREE)");
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd loop, sys::Open("/dev/loop" + std::to_string(n), O_RDWR));
  return {};
}

// Mounts a crashed probe left behind.
void SweepProbeDirs(const std::string& state_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir, ec)) {
    if (entry.path().filename().string().starts_with(".disk-probe-")) {
      (void)RemoveBoundWorkspace(entry.path().string());
    }
  }
}

}  // namespace

DiskSupport ProbeDisk(const std::string& state_dir, bool reserve_images) {
  DiskSupport s;
  s.state_dir = state_dir;
  s.reserve_images = reserve_images;
  auto fd = sys::Open(state_dir, O_RDONLY | O_DIRECTORY);
  if (!fd) {
    s.project_quota_problem = s.tmpfs_problem = s.loop_problem =
        "cannot open the state directory: " + fd.error().message();
    return s;
  }
  struct statfs fs {};
  if (::fstatfs(fd->get(), &fs) == 0) s.filesystem = FilesystemName(fs.f_type);
  SweepProbeDirs(state_dir);
  if (auto q = TryProjectQuota(fd->get(), state_dir); q) {
    s.project_quota = true;
  } else {
    s.project_quota_problem = q.error().message();
  }
  if (auto t = TryTmpfs(state_dir); t) {
    s.tmpfs = true;
  } else {
    s.tmpfs_problem = t.error().message();
  }
  if (auto l = CheckLoopImages(); l) {
    s.loop_images = true;
  } else {
    s.loop_problem = l.error().message();
  }
  if (s.loop_images && reserve_images) {
    if (auto r = TryReserve(fd->get()); !r) {
      s.loop_images = false;
      s.loop_problem = "--reserve-disk: " + r.error().message();
    }
  }
  return s;
}

std::string TmpfsLimitOptions(const DiskLimits& limits) {
  std::string options;
  if (limits.bytes) options += ",size=" + std::to_string(*limits.bytes);
  if (limits.inodes) options += ",nr_inodes=" + std::to_string(*limits.inodes);
  return options;
}

CapabilityStatus DiskStatus(const DiskSupport& support, WorkspaceKind kind) {
  if (support.state_dir.empty()) {
    return Unavailable(
        "disk bounds apply to the daemon's workspaces: cordon run uses the caller's directory "
        "as it is",
        "run it through cordon serve, which bounds the workspaces it makes");
  }
  if (support.project_quota) return Enforced("project_quota");
  if (kind == WorkspaceKind::kEphemeral && support.tmpfs) return Enforced("tmpfs");
  if (support.loop_images) return Enforced("loop_image");
  std::string reason = "no way to bound a workspace under " + support.state_dir + " (" +
                       (support.filesystem.empty() ? "?" : support.filesystem) +
                       "): project quotas: " + support.project_quota_problem;
  if (kind == WorkspaceKind::kEphemeral) reason += "; tmpfs: " + support.tmpfs_problem;
  reason += "; loop images: " + support.loop_problem;
  return Unavailable(reason, kDiskFix);
}

CapabilityStatus DiskProbeStatus(const DiskSupport& support) {
  CapabilityStatus runs = DiskStatus(support, WorkspaceKind::kEphemeral);
  CapabilityStatus sessions = DiskStatus(support, WorkspaceKind::kPersistent);
  if (runs.enforceable && sessions.enforceable) {
    return Enforced(runs.mechanism == sessions.mechanism
                        ? runs.mechanism
                        : runs.mechanism + "+" + sessions.mechanism);
  }
  if (!runs.enforceable) return runs;
  sessions.reason = "session workspaces cannot be bounded (" + sessions.reason +
                    "); run workspaces can (" + runs.mechanism + ")";
  return sessions;
}

nlohmann::json ToJson(const DiskSupport& s) {
  using nlohmann::json;
  auto opt = [](const std::string& v) { return v.empty() ? json() : json(v); };
  auto mechanism = [&](WorkspaceKind kind) {
    CapabilityStatus st = DiskStatus(s, kind);
    return st.enforceable ? json(st.mechanism) : json();
  };
  return {{"state_dir", opt(s.state_dir)},
          {"filesystem", opt(s.filesystem)},
          {"project_quota", s.project_quota},
          {"tmpfs", s.tmpfs},
          {"loop_images", s.loop_images},
          {"reserve_images", s.reserve_images},
          {"problems",
           {{"project_quota", opt(s.project_quota_problem)},
            {"tmpfs", opt(s.tmpfs_problem)},
            {"loop_images", opt(s.loop_problem)}}},
          {"ephemeral", mechanism(WorkspaceKind::kEphemeral)},
          {"persistent", mechanism(WorkspaceKind::kPersistent)}};
}

sys::Result<StateRoom> ObserveStateRoom(const std::string& state_dir,
                                        const std::vector<std::string>& image_dirs) {
  struct statvfs fs {};
  if (::statvfs(state_dir.c_str(), &fs) != 0) {
    return sys::FailErrno("statvfs(\"" + state_dir + "\")");
  }
  StateRoom room;
  room.size_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  room.free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  for (const std::string& dir : image_dirs) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() != ".img") continue;
      struct stat st {};
      if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const auto held = static_cast<uint64_t>(st.st_blocks) * 512;
      const auto size = static_cast<uint64_t>(st.st_size);
      if (size > held) room.images_unwritten_bytes += size - held;
    }
  }
  return room;
}

sys::Result<std::string> BoundWorkspace(const DiskSupport& support, const std::string& dir,
                                        WorkspaceKind kind, const DiskLimits& limits) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  struct stat owner {};
  if (::fstat(fd.get(), &owner) != 0) return sys::FailErrno("fstat(\"" + dir + "\")");
  const std::string image = dir + ".img";
  if (kind == WorkspaceKind::kPersistent) {
    // A reused workspace keeps the bound it was given.
    if (::access(image.c_str(), F_OK) == 0) {
      if (!IsMountRoot(fd.get())) {
        // (Made by a daemon that did not reserve, it is reserved now.)
        if (support.reserve_images) CORDON_RETURN_IF_ERROR(ReserveImage(image));
        CORDON_RETURN_IF_ERROR(MountImage(image, dir));
      }
      return std::string("loop_image");
    }
    if (IsMountRoot(fd.get())) return ObserveBound(dir, limits);
    if (auto fsx = GetFsx(fd.get(), dir); fsx && OurProject(fsx->fsx_projid)) {
      CORDON_RETURN_IF_ERROR(SetProjectLimits(fd.get(), fsx->fsx_projid, limits));
      return std::string("project_quota");
    }
    if (!IsEmptyDir(fd.get())) {
      return sys::Fail("the workspace " + dir +
                           " holds files from before it was bounded (a bound now would hide "
                           "them or not count them); create the session with fresh_workspace "
                           "to bound it",
                       ENOTEMPTY);
    }
  }
  if (support.project_quota) {
    CORDON_RETURN_IF_ERROR(BoundByQuota(fd.get(), dir, limits));
    return std::string("project_quota");
  }
  if (kind == WorkspaceKind::kEphemeral && support.tmpfs) {
    CORDON_RETURN_IF_ERROR(MountTmpfs(dir, owner, limits));
    return std::string("tmpfs");
  }
  if (support.loop_images) {
    fd.reset();
    CORDON_RETURN_IF_ERROR(BoundByImage(support, dir, owner, limits));
    return std::string("loop_image");
  }
  CapabilityStatus status = DiskStatus(support, kind);
  return sys::Fail(status.reason, EOPNOTSUPP);
}

sys::Result<void> ReleaseWorkspace(const std::string& dir) {
  auto fd = sys::Open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  // Everything mounted here is the workspace's (a bound mounted twice by
  // a race is unmounted twice).
  for (int i = 0; fd && i < 8 && IsMountRoot(fd->get()); ++i) {
    fd->reset();
    if (::umount2(dir.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
      return sys::FailErrno("umount2(\"" + dir + "\", MNT_DETACH)");
    }
    fd = sys::Open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  }
  return {};
}

sys::Result<void> RemoveBoundWorkspace(const std::string& dir) {
  std::optional<uint32_t> project;
  auto parent = sys::Open(Dirname(dir), O_RDONLY | O_DIRECTORY);
  CORDON_RETURN_IF_ERROR(ReleaseWorkspace(dir));
  auto fd = sys::Open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (fd) {
    if (auto fsx = GetFsx(fd->get(), dir); fsx && OurProject(fsx->fsx_projid)) {
      project = fsx->fsx_projid;
    }
    fd->reset();
  }
  const std::string image = dir + ".img";
  if (::unlink(image.c_str()) != 0 && errno != ENOENT) {
    return sys::FailErrno("unlink(\"" + image + "\")");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return sys::Fail("remove " + dir + ": " + ec.message(), ec.value());
  // The project is free once nothing is charged to it; its limits go too.
  // (XFS may count a removed inode for a moment longer: the id then keeps
  // its limits, and is still free to claim.)
  if (project && parent) {
    std::lock_guard lock(ProjectsMutex());
    if (auto q = GetProject(parent->get(), *project); q && q->dqb_curinodes == 0) {
      (void)SetProjectLimits(parent->get(), *project, {});
    }
  }
  return {};
}

sys::Result<void> MoveBoundWorkspace(const std::string& from, const std::string& to) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!IsMountRoot(fd.get())) {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return sys::FailErrno("rename(\"" + from + "\", \"" + to + "\")");
    }
    return {};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys::FailErrno("fstat(\"" + from + "\")");
  fd.reset();
  if (::mkdir(to.c_str(), 0700) != 0) return sys::FailErrno("mkdir(\"" + to + "\")");
  if (::mount(from.c_str(), to.c_str(), nullptr, MS_MOVE, nullptr) != 0) {
    int err = errno;
    ::rmdir(to.c_str());
    return sys::Fail("mount(\"" + from + "\", \"" + to + "\", MS_MOVE)", err);
  }
  const std::string image = from + ".img", moved = to + ".img";
  if (::rename(image.c_str(), moved.c_str()) != 0 && errno != ENOENT) {
    return sys::FailErrno("rename(\"" + image + "\", \"" + moved + "\")");
  }
  ::rmdir(from.c_str());  // the directory the filesystem was mounted on
  return {};
}

sys::Result<std::string> ObserveBound(const std::string& dir, const DiskLimits& limits) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(dir, O_RDONLY | O_DIRECTORY));
  if (IsMountRoot(fd.get())) {
    struct statfs fs {};
    struct stat st {};
    if (::fstatfs(fd.get(), &fs) != 0 || ::fstat(fd.get(), &st) != 0) {
      return sys::FailErrno("fstatfs(\"" + dir + "\")");
    }
    const uint64_t capacity = static_cast<uint64_t>(fs.f_blocks) * fs.f_bsize;
    // tmpfs rounds its size up to whole pages.
    if (limits.bytes && capacity > static_cast<uint64_t>(*limits.bytes) + 4096) {
      return sys::Fail("its filesystem holds " + std::to_string(capacity) +
                           " bytes, more than limits.disk_bytes (" + std::to_string(*limits.bytes) +
                           ")",
                       EFBIG);
    }
    // mkfs rounds the inodes up to whole inode-table blocks per group.
    if (limits.inodes &&
        fs.f_files > static_cast<uint64_t>(*limits.inodes) + *limits.inodes / 64 + 1024) {
      return sys::Fail("its filesystem holds " + std::to_string(fs.f_files) +
                           " inodes, more than limits.disk_inodes (" +
                           std::to_string(*limits.inodes) + ")",
                       EFBIG);
    }
    if (static_cast<uint64_t>(fs.f_type) == TMPFS_MAGIC) return std::string("tmpfs");
    if (major(st.st_dev) == kLoopMajor) return std::string("loop_image");
    return std::string("filesystem");
  }
  auto fsx = GetFsx(fd.get(), dir);
  if (fsx && fsx->fsx_projid != 0 && (fsx->fsx_xflags & FS_XFLAG_PROJINHERIT)) {
    const std::string project = "project " + std::to_string(fsx->fsx_projid);
    CORDON_RETURN_IF_ERROR(ProjectQuotasOn(fd.get(), dir));
    CORDON_ASSIGN_OR_RETURN(struct if_dqblk q, GetProject(fd.get(), fsx->fsx_projid));
    if (limits.bytes && (q.dqb_bhardlimit == 0 ||
                         q.dqb_bhardlimit > (static_cast<uint64_t>(*limits.bytes) + 1023) / 1024)) {
      return sys::Fail(project + " has a block limit of " + std::to_string(q.dqb_bhardlimit) +
                           " KiB, not limits.disk_bytes",
                       EFBIG);
    }
    if (limits.inodes &&
        (q.dqb_ihardlimit == 0 || q.dqb_ihardlimit > static_cast<uint64_t>(*limits.inodes))) {
      return sys::Fail(project + " has an inode limit of " + std::to_string(q.dqb_ihardlimit) +
                           ", not limits.disk_inodes",
                       EFBIG);
    }
    return std::string("project_quota");
  }
  return sys::Fail("it is neither a filesystem of its own nor under a project quota", ENOENT);
}

CapabilityStatus WorkspaceDiskStatus(const DiskSupport& support, const std::string& workspace,
                                     const DiskLimits& limits, bool sandbox_privileged) {
  if (workspace.empty()) return Unavailable("the run has no workspace to bound", "");
  auto observed = ObserveBound(workspace, limits);
  if (observed && *observed == "project_quota" && sandbox_privileged) {
    struct statfs fs {};
    if (::statfs(workspace.c_str(), &fs) == 0 &&
        static_cast<uint64_t>(fs.f_type) == EXT4_SUPER_MAGIC) {
      return Unavailable(
          "the workspace has an ext4 project quota, which a process with CAP_SYS_RESOURCE "
          "writes past, and this sandbox runs as root without a user namespace",
          "run it with isolation (a user namespace), or put the state directory on XFS",
          "project_quota");
    }
  }
  if (observed) return Enforced(*observed);
  std::string reason = "the workspace " + workspace + " is not bounded: " + observed.error().what();
  CapabilityStatus host = support.state_dir.empty() ? DiskStatus(support, WorkspaceKind::kEphemeral)
                                                    : DiskProbeStatus(support);
  if (!host.enforceable) return Unavailable(reason + "; " + host.reason, host.fix);
  return Unavailable(reason,
                     "let the daemon make the workspace (a run without \"workspace\", or a "
                     "session); see the daemon's log for why bounding it failed");
}

}  // namespace cordon::contain
