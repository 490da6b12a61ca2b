#include "contain/namespaces.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cordon::contain {
namespace {

constexpr uint64_t kNamespaces =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;

int64_t ReadNumber(const char* path, int64_t fallback) {
  auto text = sys::ReadFile(path, 64);
  if (!text) return fallback;
  char* end = nullptr;
  long long value = std::strtoll(text->c_str(), &end, 10);
  return end == text->c_str() ? fallback : value;
}

// The probe's child shares our memory and we are suspended until it has
// exited (CLONE_VM | CLONE_VFORK): it needs nothing but a stack, and it
// reports what it tried in `failed` (a call's name) and `err`.
struct ProbeChild {
  alignas(16) char stack[4096];
  bool thorough = false;
  const char* failed = nullptr;
  int err = 0;
};

// Under a seccomp filter of the host's (a container's default profile),
// a user namespace can be made while what a sandbox does in it is refused:
// Docker's and podman's profiles refuse sethostname and mount to a process
// without CAP_SYS_ADMIN outside, whatever namespace it is in. The thorough
// child tries both, in namespaces of its own.
int ProbeChildMain(void* arg) {
  auto* child = static_cast<ProbeChild*>(arg);
  if (!child->thorough) ::_exit(0);
  if (::sethostname("cordon", 6) != 0) {
    child->failed = "sethostname";
    child->err = errno;
  } else if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    child->failed = "mount(\"/\", MS_REC | MS_PRIVATE)";
    child->err = errno;
  }
  ::_exit(0);
}

// Whether this process runs under a seccomp filter (Seccomp: 2).
bool Filtered() {
  auto status = sys::ReadFile("/proc/self/status", 1 << 16);
  return status && status->find("\nSeccomp:\t2") != std::string::npos;
}

bool Has(const struct __user_cap_data_struct* data, int cap) {
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

}  // namespace

uint64_t SandboxCloneFlags() { return kNamespaces; }

NamespaceSupport ProbeNamespaces() {
  NamespaceSupport s;
  // Settings that refuse before anything is tried say more than the errno.
  if (ReadNumber("/proc/sys/user/max_user_namespaces", 1) == 0) {
    s.problem = "user namespaces are switched off (/proc/sys/user/max_user_namespaces is 0)";
    return s;
  }
  if (::geteuid() != 0) {
    if (ReadNumber("/proc/sys/kernel/unprivileged_userns_clone", 1) == 0) {
      s.problem =
          "unprivileged user namespaces are switched off "
          "(/proc/sys/kernel/unprivileged_userns_clone is 0)";
      return s;
    }
    if (ReadNumber("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", 0) == 1) {
      s.problem =
          "AppArmor restricts unprivileged user namespaces "
          "(/proc/sys/kernel/apparmor_restrict_unprivileged_userns is 1)";
      return s;
    }
  }
  // A user namespace, made: ~40 us. (One with a mount namespace in it
  // would prove a little more for five times the price, paid by every
  // run; the user namespace is what restricted hosts refuse.) Under a
  // filter of the host's, the price is paid: there the namespaces can be
  // made and still be of no use.
  ProbeChild child;
  child.thorough = Filtered();
  const int flags = child.thorough ? CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWUTS : CLONE_NEWUSER;
  pid_t pid = ::clone(ProbeChildMain, child.stack + sizeof child.stack,
                      flags | CLONE_VM | CLONE_VFORK | SIGCHLD, &child);
  if (pid < 0) {
    const int err = errno;
    s.problem = std::string("cannot create a user namespace: clone(CLONE_NEWUSER") +
                (child.thorough ? " | CLONE_NEWNS | CLONE_NEWUTS" : "") +
                "): " + sys::ErrnoName(err) + " (" + std::strerror(err) + ")";
    return s;
  }
  ::waitpid(pid, nullptr, __WALL);
  if (child.failed) {
    s.problem = std::string(
                    "this process runs under a seccomp filter (a container's) that "
                    "refuses ") +
                child.failed + " in a sandbox's own namespaces: " + sys::ErrnoName(child.err) +
                " (" + std::strerror(child.err) +
                "); run the container privileged, or with a seccomp profile that allows mount "
                "and sethostname in user namespaces";
    return s;
  }
  s.available = true;
  s.network = ReadNumber("/proc/sys/user/max_net_namespaces", 1) != 0;
  return s;
}

bool CanMapIdRange(IdRange range) {
  if (::geteuid() != 0) return false;
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  if (!Has(data, CAP_SETUID) || !Has(data, CAP_SETGID)) return false;
  // Inside a container's user namespace only its own mapped ids exist.
  auto covered = [&](const char* file) {
    auto map = sys::ReadFile(file, 4096);
    if (!map) return false;
    size_t pos = 0;
    while (pos < map->size()) {
      size_t end = map->find('\n', pos);
      if (end == std::string::npos) end = map->size();
      unsigned long long inside = 0, outside = 0, count = 0;
      if (std::sscanf(map->substr(pos, end - pos).c_str(), "%llu %llu %llu", &inside, &outside,
                      &count) == 3 &&
          inside <= range.first && uint64_t{range.first} + range.count <= inside + count) {
        return true;
      }
      pos = end + 1;
    }
    return false;
  };
  return covered("/proc/self/uid_map") && covered("/proc/self/gid_map");
}

sys::Result<void> WriteIdMaps(pid_t child, uint32_t outside_uid, uint32_t outside_gid) {
  std::string proc = "/proc/" + std::to_string(child) + "/";
  CORDON_RETURN_IF_ERROR(
      sys::WriteFile(proc + "uid_map", "0 " + std::to_string(outside_uid) + " 1"));
  // Before gid_map: a sandbox must not drop groups to get past a
  // negative group permission (and unprivileged mapping requires it).
  CORDON_RETURN_IF_ERROR(sys::WriteFile(proc + "setgroups", "deny"));
  return sys::WriteFile(proc + "gid_map", "0 " + std::to_string(outside_gid) + " 1");
}

sys::Result<sys::UniqueFd> DetachedTree(const std::string& path, bool recursive) {
  int fd = static_cast<int>(
      ::syscall(SYS_open_tree, AT_FDCWD, path.c_str(),
                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0)));
  if (fd < 0) {
    return sys::FailErrno("open_tree(\"" + path + "\", OPEN_TREE_CLONE" +
                          (recursive ? " | AT_RECURSIVE" : "") + ")");
  }
  return sys::UniqueFd(fd);
}

sys::Result<void> IdmapTree(int tree_fd, int userns_fd) {
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<uint64_t>(userns_fd);
  if (::syscall(SYS_mount_setattr, tree_fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    return sys::FailErrno("mount_setattr(MOUNT_ATTR_IDMAP)");
  }
  return {};
}

sys::Result<sys::UniqueFd> MakeUserNamespace(uint32_t inside_uid, uint32_t outside_uid,
                                             uint32_t inside_gid, uint32_t outside_gid) {
  // A child that only holds the namespace until we have opened it.
  CORDON_ASSIGN_OR_RETURN(sys::PipeFds hold, sys::MakePipe());
  struct clone_args args {};
  args.flags = CLONE_NEWUSER;
  args.exit_signal = SIGCHLD;
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0) return sys::FailErrno("clone3(CLONE_NEWUSER)");
  if (pid == 0) {
    // Our copy of the write end would keep the read below from seeing EOF.
    ::close(hold.write.get());
    char c;
    (void)!::read(hold.read.get(), &c, 1);
    ::_exit(0);
  }
  hold.read.reset();
  auto result = [&]() -> sys::Result<sys::UniqueFd> {
    std::string proc = "/proc/" + std::to_string(pid) + "/";
    CORDON_RETURN_IF_ERROR(sys::WriteFile(
        proc + "uid_map", std::to_string(inside_uid) + " " + std::to_string(outside_uid) + " 1"));
    CORDON_RETURN_IF_ERROR(sys::WriteFile(proc + "setgroups", "deny"));
    CORDON_RETURN_IF_ERROR(sys::WriteFile(
        proc + "gid_map", std::to_string(inside_gid) + " " + std::to_string(outside_gid) + " 1"));
    return sys::Open(proc + "ns/user", O_RDONLY);
  }();
  hold.write.reset();  // EOF: the holder exits
  ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
  return result;
}

int AwaitByte(int fd) {
  char go = 0;
  ssize_t n;
  do {
    n = ::read(fd, &go, 1);
  } while (n < 0 && errno == EINTR);
  return n == 1 ? 0 : n < 0 ? errno : ECANCELED;
}

int AwaitIdMaps(int sync_fd) {
  if (int err = AwaitByte(sync_fd); err != 0) return err;
  // The credentials still carry the supervisor's ids, which mean nothing
  // here (unmapped: files could not even be created); take the mapped ones.
  // Raw system calls: the C library's wrappers would try to reach the
  // supervisor's other threads, which do not exist in this child.
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0 || ::syscall(SYS_setresuid, 0, 0, 0) != 0) {
    return errno;
  }
  return 0;
}

int SetHostname(const char* name) {
  return ::sethostname(name, std::strlen(name)) == 0 ? 0 : errno;
}

int NewNetwork() {
  if (::unshare(CLONE_NEWNET) != 0) return errno;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  int err = 0;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    err = errno;
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) err = errno;
  }
  ::close(fd);
  return err;
}

}  // namespace cordon::contain
