#include "contain/launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <string>

#include "contain/forked_memory.h"
#include "contain/landlock.h"
#include "contain/mounts.h"
#include "contain/namespaces.h"
#include "contain/pid_init.h"
#include "contain/privileges.h"
#include "contain/seccomp.h"

namespace cordon::contain {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct SetupRecord {
  int32_t step;
  int32_t err;
  int32_t index;  // the part of the step that failed, or -1
};

constexpr const char* kHostname = "cordon";

// Everything the child reads, as plain pointers and descriptors. Built in
// the parent (on its stack, with what it points to in a ChildMemory: the
// child has none of the heap); the child only reads it.
struct ChildPlan {
  int error_fd;
  const int* join_fds;
  size_t join_count;
  const RlimitSetting* rlimits;
  size_t rlimit_count;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  int workspace_fd;  // -1: stay in the caller's directory
  const char* const* candidates;
  int exec_fd;  // -1: search `candidates`
  bool keep_exec_fd;
  char* const* argv;
  char* const* envp;
  // Isolation (all off for isolation none).
  bool namespaced;    // clone3 made new namespaces: this child is their init
  bool await_record;  // no cgroup holds the tree: wait for sync_fd's byte first
  int sync_fd;        // the supervisor writes a byte once the id maps are in place
                      // (and, with await_record, the process is recorded)
  int sync_peer_fd;   // the supervisor's end: closed here, so that its EOF can be seen
  int status_fd;      // the init reports the command's exit here
  int lease_fd;       // the sandbox's outside id, held by the init
  bool new_network;   // a network namespace of its own, with lo up
  const MountStep* mounts;
  size_t mount_count;
  const char* cwd;  // set: chdir here (the sandbox's view) instead of workspace_fd
  bool drop_privileges;
  bool switch_ids;  // no user namespace: become `ids` (Sandbox::switches_ids)
  OwnIds ids;
  // The privileges, Landlock and seccomp are in place already: a parked
  // init set them on itself, and the command inherits them.
  bool confined;
  const LandlockPlan* landlock;      // null: none
  const struct sock_fprog* seccomp;  // null: none
  std::span<char> command_line;      // the supervisor's, for the init to overwrite
  std::span<char> environment;       // the supervisor's, for the init to clear
  int control_fd;                    // parked: where the command comes (-1: not parked)
};

// A parked init's command, as SendCommand writes it on the control socket:
// this header (with the stdin descriptor attached), then `bytes` bytes:
// `rlimit_count` RlimitSettings, and argv, env and the exec candidates as
// NUL-terminated strings, in that order.
struct ParkedHeader {
  uint32_t bytes;
  uint32_t argc;
  uint32_t envc;
  uint32_t candidate_count;
  uint32_t rlimit_count;
};

// What a parked init can take: it cannot allocate, so the command lands in
// a fixed buffer of its own (the supervisor's copy is never touched, and a
// bss page costs nothing until it is).
constexpr size_t kParkedBytes = size_t{1} << 20;
constexpr size_t kParkedStrings = 16384;
constexpr size_t kParkedRlimits = 16;

struct ParkedCommand {
  alignas(16) char bytes[kParkedBytes];
  char* strings[kParkedStrings + 3];  // argv, env and candidates, each ending in null
};
ParkedCommand parked_command;

constexpr char kInitTitle[] = "cordon-init";

// --- Child side: async-signal-safe only. ---

[[noreturn]] void Report(const ChildPlan& p, SetupStep step, int err, int index = -1) {
  SetupRecord record{static_cast<int32_t>(step), err, index};
  // Nothing to do if this fails: the parent then sees exit 127 without a record.
  (void)!::write(p.error_fd, &record, sizeof record);
  ::_exit(127);
}

int JoinCgroups(const ChildPlan& p) {
  for (size_t i = 0; i < p.join_count; ++i) {
    if (::write(p.join_fds[i], "0", 1) != 1) return errno;
  }
  return 0;
}

int ResetSignals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::sigaction(sig, &dfl, nullptr);  // EINVAL for libc-internal signals is fine
  }
  sigset_t none;
  sigemptyset(&none);
  return ::sigprocmask(SIG_SETMASK, &none, nullptr) == 0 ? 0 : errno;
}

int NewSession() { return ::setsid() >= 0 ? 0 : errno; }

int ApplyRlimits(const ChildPlan& p) {
  for (size_t i = 0; i < p.rlimit_count; ++i) {
    struct rlimit rl = {p.rlimits[i].soft, p.rlimits[i].hard};
    if (::setrlimit(p.rlimits[i].resource, &rl) != 0) return errno;
  }
  return 0;
}

int SetupStdio(const ChildPlan& p) {
  // The parent made sure these are all >= 3, so no dup2 clobbers another.
  const int fds[3] = {p.stdin_fd, p.stdout_fd, p.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    if (::dup2(fds[target], target) < 0) return errno;
  }
  return 0;
}

int EnterWorkspace(const ChildPlan& p) {
  if (p.cwd != nullptr) return ::chdir(p.cwd) == 0 ? 0 : errno;
  if (p.workspace_fd < 0) return 0;
  return ::fchdir(p.workspace_fd) == 0 ? 0 : errno;
}

int CloseInheritedFds() {
  // Mark, not close: the error pipe must stay open until execve succeeds.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return 0;
  if (errno != EINVAL) return errno;
  // CLOSE_RANGE_CLOEXEC needs Linux 5.11: before it (Debian 11's 5.10),
  // mark each descriptor /proc/self/fd lists (getdents64 into a buffer on
  // the stack: no allocation in the child).
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return errno;
  alignas(struct dirent64) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) {
      int err = n < 0 ? errno : 0;
      ::close(dir);
      return err;
    }
    for (long off = 0; off < n;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(buf + off);
      off += entry->d_reclen;
      int fd = 0;
      const char* c = entry->d_name;
      for (; *c >= '0' && *c <= '9'; ++c) fd = fd * 10 + (*c - '0');
      if (*c != '\0' || c == entry->d_name || fd < 3 || fd == dir) continue;  // ".", ".."
      if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 && errno != EBADF) {
        int err = errno;
        ::close(dir);
        return err;
      }
    }
  }
}

int Exec(const ChildPlan& p) {
  if (p.exec_fd >= 0) {
    // close_range marked it close-on-exec; a script's interpreter needs it.
    if (p.keep_exec_fd && ::fcntl(p.exec_fd, F_SETFD, 0) != 0) return errno;
    ::syscall(SYS_execveat, p.exec_fd, "", p.argv, p.envp, AT_EMPTY_PATH);
    return errno;
  }
  int err = ENOENT;
  bool denied = false;
  for (const char* const* c = p.candidates; *c != nullptr; ++c) {
    ::execve(*c, p.argv, p.envp);
    err = errno;
    if (err == EACCES) {
      denied = true;
    } else if (err != ENOENT && err != ENOTDIR && err != ENAMETOOLONG && err != ELOOP) {
      return err;  // found but cannot run it: stop searching, as execvp does
    }
  }
  return denied ? EACCES : err;
}

// Reads exactly `n` bytes of the control socket; the descriptor that came
// with them, if any, is put in `passed` (once).
int ReadParked(int fd, char* to, size_t n, int* passed) {
  while (n > 0) {
    struct iovec iov {
      to, n
    };
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EPIPE;  // the supervisor gave the sandbox up
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && *passed < 0) {
        std::memcpy(passed, CMSG_DATA(c), sizeof(int));
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) return EBADMSG;
    to += got;
    n -= static_cast<size_t>(got);
  }
  return 0;
}

// Points `out[0..count)` at the next `count` strings of [*at, end), and
// `out[count]` at null; false when they are not there.
bool TakeStrings(char** at, char* end, uint32_t count, char** out) {
  for (uint32_t i = 0; i < count; ++i) {
    auto* nul = static_cast<char*>(std::memchr(*at, '\0', static_cast<size_t>(end - *at)));
    if (nul == nullptr) return false;
    out[i] = *at;
    *at = nul + 1;
  }
  out[count] = nullptr;
  return true;
}

// A parked init: says it is ready, then waits for its command and makes
// `command` the plan that runs it.
int AwaitCommand(const ChildPlan& p, ChildPlan* command) {
  if (::write(p.control_fd, "r", 1) != 1) return errno;
  ParkedHeader h{};
  int stdin_fd = -1;
  if (int err = ReadParked(p.control_fd, reinterpret_cast<char*>(&h), sizeof h, &stdin_fd)) {
    return err;
  }
  const size_t strings = size_t{h.argc} + h.envc + h.candidate_count;
  const size_t rlimit_bytes = size_t{h.rlimit_count} * sizeof(RlimitSetting);
  if (h.bytes > kParkedBytes || strings > kParkedStrings || h.rlimit_count > kParkedRlimits ||
      rlimit_bytes > h.bytes || h.argc == 0) {
    return E2BIG;
  }
  ParkedCommand& c = parked_command;
  if (int err = ReadParked(p.control_fd, c.bytes, h.bytes, &stdin_fd)) return err;
  if (stdin_fd < 0) return EBADMSG;
  if (stdin_fd <= 2) {  // the command's dup2 onto 0..2 must not clobber it
    stdin_fd = ::fcntl(stdin_fd, F_DUPFD_CLOEXEC, 3);
    if (stdin_fd < 0) return errno;
  }
  char* at = c.bytes + rlimit_bytes;
  char* const end = c.bytes + h.bytes;
  char** argv = c.strings;
  char** envp = argv + h.argc + 1;
  char** candidates = envp + h.envc + 1;
  if (!TakeStrings(&at, end, h.argc, argv) || !TakeStrings(&at, end, h.envc, envp) ||
      !TakeStrings(&at, end, h.candidate_count, candidates) || at != end) {
    return EBADMSG;
  }
  command->argv = argv;
  command->envp = envp;
  command->candidates = candidates;
  command->rlimits = reinterpret_cast<const RlimitSetting*>(c.bytes);
  command->rlimit_count = h.rlimit_count;
  command->stdin_fd = stdin_fd;
  return 0;
}

#define CORDON_STEP(step, call)                              \
  do {                                                       \
    if (int err_ = (call); err_ != 0) Report(p, step, err_); \
  } while (0)

// The command's own steps, in the process that becomes it: the main
// process itself, or (with namespaces) the child of the pid namespace's
// init. Privileges go in order: capabilities, then no_new_privs (which
// Landlock needs), a session keyring of its own, Landlock (no_new_privs and
// Landlock first, where the ids change: see below), and
// seccomp last of all, since it refuses the very calls the steps before
// it make. The rlimits come after the inherited descriptors are closed:
// Landlock opens one per rule, which a small --open-files would refuse
// (EMFILE) if it applied already.
[[noreturn]] void CommandMain(const ChildPlan& p) {
  if (p.namespaced) CORDON_STEP(SetupStep::kSignals, UnblockSignals());
  CORDON_STEP(SetupStep::kStdio, SetupStdio(p));
  CORDON_STEP(SetupStep::kWorkspace, EnterWorkspace(p));
  // A sandbox that becomes a uid of its own takes its Landlock domain
  // first, while it is still root: the rules open their paths here, and
  // the workspace under a daemon's 0700 state directory is closed to the
  // new uid. no_new_privs comes before it: Landlock needs it of a root
  // without CAP_SYS_ADMIN (a container's), and it does not stop the id
  // change (it governs execve), nor does the domain.
  const bool landlock_first = p.switch_ids && !p.confined;
  if (landlock_first) {
    CORDON_STEP(SetupStep::kNoNewPrivs, SetNoNewPrivs());
    CORDON_STEP(SetupStep::kLandlock, ApplyLandlock(p.landlock));
  }
  if (p.drop_privileges && !p.confined) {
    CORDON_STEP(SetupStep::kCapabilities, DropCapabilities(p.switch_ids ? &p.ids : nullptr));
    if (!landlock_first) CORDON_STEP(SetupStep::kNoNewPrivs, SetNoNewPrivs());
    CORDON_STEP(SetupStep::kKeyring, NewSessionKeyring());
  }
  if (!p.confined && !landlock_first) CORDON_STEP(SetupStep::kLandlock, ApplyLandlock(p.landlock));
  CORDON_STEP(SetupStep::kCloseFds, CloseInheritedFds());
  CORDON_STEP(SetupStep::kRlimits, ApplyRlimits(p));
  if (!p.confined) {
    CORDON_STEP(SetupStep::kSeccomp, InstallSeccomp(p.seccomp));  // last: it forbids the above
  }
  Report(p, SetupStep::kExec, Exec(p));  // returns only on failure
}

int CommandEntry(void* plan) { CommandMain(*static_cast<const ChildPlan*>(plan)); }

// The setup checklist. Without namespaces (isolation none, or Landlock
// alone) the child goes straight on to be the command. With them it is
// pid 1 of a new pid namespace: it builds the sandbox's world as root of
// its user namespace, then forks the command and stays as its init.
[[noreturn]] void ChildMain(const ChildPlan& p) {
  CORDON_STEP(SetupStep::kCgroup, JoinCgroups(p));
  CORDON_STEP(SetupStep::kSignals, ResetSignals());
  CORDON_STEP(SetupStep::kSession, NewSession());
  if (!p.namespaced) {
    if (p.await_record) {
      ::close(p.sync_peer_fd);
      CORDON_STEP(SetupStep::kRecorded, AwaitByte(p.sync_fd));
    }
    CommandMain(p);
  }

  // First, while the supervisor writes the id maps: the network namespace
  // is the slowest to make and needs no mapping.
  if (p.new_network) CORDON_STEP(SetupStep::kNetwork, NewNetwork());
  ::close(p.sync_peer_fd);
  CORDON_STEP(SetupStep::kUserNamespace, AwaitIdMaps(p.sync_fd));
  CORDON_STEP(SetupStep::kHostname, SetHostname(kHostname));
  int failed_mount = -1;
  if (int err = BuildRoot(p.mounts, p.mount_count, &failed_mount); err != 0) {
    Report(p, SetupStep::kMounts, err, failed_mount);
  }
  // The init is a copy of the supervisor: unrenamed, the sandbox would read
  // the supervisor's command line (`cordon serve --state-dir ...`) as pid 1's.
  // This overwrites the copy's; the supervisor's own is not touched. Before
  // the command exists, not after: /proc/1/cmdline is readable to anyone
  // in the namespace, undumpable or not, and a command that read it from
  // its first instruction found the supervisor's (its --owner, its state
  // directory) while the init had not got this far. (The command's own
  // argv and environment are the plan's, not this memory.)
  ::prctl(PR_SET_NAME, kInitTitle);
  if (!p.command_line.empty()) {
    std::memset(p.command_line.data(), 0, p.command_line.size());
    std::memcpy(p.command_line.data(), kInitTitle,
                std::min(sizeof kInitTitle - 1, p.command_line.size() - 1));
  }
  // Its environment too (the daemon's may hold secrets): /proc/1/environ
  // is refused to the command already (the init is undumpable), and this
  // leaves nothing there should that ever change. The init reads none.
  if (!p.environment.empty()) std::memset(p.environment.data(), 0, p.environment.size());
  CORDON_STEP(SetupStep::kInit, BlockInitSignals());
  // Parked: the sandbox is made; the command is the one part still to come.
  // What it would inherit anyway is done now, in the init itself, before
  // anything of a caller's exists: the init then waits with no privileges,
  // under the command's Landlock domain and seccomp filter (the calls it
  // makes from here on, recvmsg, clone without namespaces, wait4, write
  // and kill, are none that the filter refuses).
  ChildPlan command_plan = p;
  if (p.control_fd >= 0) {
    if (p.drop_privileges) {
      CORDON_STEP(SetupStep::kCapabilities, DropCapabilities());
      CORDON_STEP(SetupStep::kNoNewPrivs, SetNoNewPrivs());
      CORDON_STEP(SetupStep::kKeyring, NewSessionKeyring());
    }
    CORDON_STEP(SetupStep::kLandlock, ApplyLandlock(p.landlock));
    CORDON_STEP(SetupStep::kSeccomp, InstallSeccomp(p.seccomp));
    command_plan.confined = true;
    // It may wait long, and it is a copy of the supervisor: it keeps only
    // what the command and it need. Another sandbox's pipes, or its own
    // control socket's other end, held here would keep their EOFs from
    // coming (the supervisor gone, a run's output ended).
    int keep[] = {p.error_fd, p.stdout_fd, p.stderr_fd, p.status_fd, p.lease_fd, p.control_fd};
    CloseAllBut(keep, sizeof keep / sizeof keep[0]);
    CORDON_STEP(SetupStep::kInit, AwaitCommand(p, &command_plan));
  }
  // The command shares the init's memory until its execve (CLONE_VM |
  // CLONE_VFORK, as posix_spawn does): no copy of the page tables of what
  // is a copy of the whole supervisor. Its steps only touch this stack.
  alignas(16) static char command_stack[64 * 1024];
  pid_t command = ::clone(CommandEntry, command_stack + sizeof command_stack,
                          CLONE_VM | CLONE_VFORK | SIGCHLD, &command_plan);
  if (command < 0) Report(p, SetupStep::kInit, errno);
  RunInit(command, p.status_fd, p.lease_fd);
}
#undef CORDON_STEP

// --- Parent side. ---

// Copies into `memory` what `plan` points to in the heap, and points it
// there. False when `memory` could not take it all.
bool MoveOutOfHeap(ChildPlan& plan, ChildMemory& memory) {
  plan.join_fds = memory.Copy(plan.join_fds, plan.join_count);
  plan.rlimits = memory.Copy(plan.rlimits, plan.rlimit_count);
  plan.candidates = memory.CopyStrings(plan.candidates);
  plan.argv = memory.CopyStrings(plan.argv);
  plan.envp = memory.CopyStrings(plan.envp);
  if (MountStep* steps = memory.Copy(plan.mounts, plan.mount_count)) {
    for (size_t i = 0; i < plan.mount_count; ++i) {
      steps[i].source = memory.CopyString(steps[i].source);
      steps[i].target = memory.CopyString(steps[i].target);
    }
    plan.mounts = steps;
  }
  if (LandlockPlan* landlock = memory.Copy(plan.landlock, 1)) {
    if (auto* rules = memory.Copy(landlock->rules, landlock->rule_count)) {
      for (size_t i = 0; i < landlock->rule_count; ++i) {
        rules[i].path = memory.CopyString(rules[i].path);
      }
      landlock->rules = rules;
    }
    plan.landlock = landlock;
  }
  if (auto* seccomp = memory.Copy(plan.seccomp, 1)) {
    seccomp->filter = memory.Copy(seccomp->filter, seccomp->len);
    plan.seccomp = seccomp;
  }
  return memory.ok();
}

// [start, end) of this process's /proc/self/stat fields `first` and
// `first + 1`: 48 for the command line, 50 for the environment; empty if
// they cannot be read.
std::span<char> OwnStatRange(int first) {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  uintptr_t start = 0, end = 0;
  for (int n = 3; fields >> field && n <= first + 1; ++n) {  // field 3 follows the name
    if (n == first) start = std::stoull(field);
    if (n == first + 1) end = std::stoull(field);
  }
  if (start == 0 || end <= start) return {};
  return {reinterpret_cast<char*>(start), end - start};
}

std::span<char> OwnCommandLine() {
  static const std::span<char> line = OwnStatRange(48);
  return line;
}

std::span<char> OwnEnvironment() {
  static const std::span<char> env = OwnStatRange(50);
  return env;
}

// Moves `fd` to a number >= 3 so the child's dup2 onto 0..2 cannot clobber
// another of its descriptors (the supervisor may run with 0..2 closed).
sys::Result<void> LiftAbove2(sys::UniqueFd& fd) {
  if (fd.get() > 2) return {};
  int lifted = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (lifted < 0) return sys::FailErrno("fcntl(F_DUPFD_CLOEXEC)");
  fd.reset(lifted);
  return {};
}

sys::Result<sys::UniqueFd> StdinFd(const std::optional<std::string>& bytes) {
  if (!bytes) return sys::Open("/dev/null", O_RDONLY);
  // A sealed memfd: the child reads it to EOF with no pump needed.
  int fd = ::memfd_create("cordon-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return sys::FailErrno("memfd_create");
  sys::UniqueFd memfd(fd);
  CORDON_RETURN_IF_ERROR(sys::WriteAll(fd, *bytes));
  if (::lseek(fd, 0, SEEK_SET) != 0) return sys::FailErrno("lseek(stdin memfd)");
  (void)::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return memfd;
}

// Blocks every signal for the duration of clone3, so that no handler of the
// supervisor runs in the child before it resets dispositions.
class SignalBlock final {
 public:
  SignalBlock() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~SignalBlock() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

 private:
  sigset_t saved_;
};

// Clears the calling thread's supplementary groups for as long as it
// lives. A root supervisor's groups (gid 0 among them) would otherwise be
// copied into the sandbox, where they still grant access to host files
// though they show as `nogroup`; and inside, with setgroups denied, they
// cannot be dropped. Credentials are per thread in the kernel and clone3
// copies the calling thread's, so the raw system call (not the C
// library's, which changes every thread) clears them for the clone alone.
class NoSupplementaryGroups final {
 public:
  NoSupplementaryGroups() {
    int n = ::getgroups(0, nullptr);
    if (n <= 0) return;
    saved_.resize(static_cast<size_t>(n));
    n = ::getgroups(n, saved_.data());
    if (n <= 0 || ::syscall(SYS_setgroups, 0, nullptr) != 0) {
      saved_.clear();  // nothing to restore
      return;
    }
    saved_.resize(static_cast<size_t>(n));
  }
  ~NoSupplementaryGroups() {
    if (!saved_.empty()) ::syscall(SYS_setgroups, saved_.size(), saved_.data());
  }
  NoSupplementaryGroups(const NoSupplementaryGroups&) = delete;
  NoSupplementaryGroups& operator=(const NoSupplementaryGroups&) = delete;

 private:
  std::vector<gid_t> saved_;
};

// The paths execve tries for the request's argv[0], by its own PATH.
std::vector<std::string> CandidatesOf(const LaunchRequest& request) {
  std::optional<std::string> path_var;
  for (const auto& entry : request.env) {
    if (entry.starts_with("PATH=")) path_var = entry.substr(5);
  }
  return ExecCandidates(request.argv.at(0), path_var);
}

}  // namespace

std::string_view SetupStepName(SetupStep step) {
  switch (step) {
    case SetupStep::kCgroup:
      return "cgroup";
    case SetupStep::kSignals:
      return "signals";
    case SetupStep::kSession:
      return "session";
    case SetupStep::kRlimits:
      return "rlimits";
    case SetupStep::kStdio:
      return "stdio";
    case SetupStep::kWorkspace:
      return "workspace";
    case SetupStep::kCloseFds:
      return "close_fds";
    case SetupStep::kExec:
      return "exec";
    case SetupStep::kUserNamespace:
      return "user_namespace";
    case SetupStep::kHostname:
      return "hostname";
    case SetupStep::kNetwork:
      return "network";
    case SetupStep::kMounts:
      return "mounts";
    case SetupStep::kInit:
      return "init";
    case SetupStep::kCapabilities:
      return "capabilities";
    case SetupStep::kNoNewPrivs:
      return "no_new_privs";
    case SetupStep::kLandlock:
      return "landlock";
    case SetupStep::kSeccomp:
      return "seccomp";
    case SetupStep::kKeyring:
      return "keyring";
    case SetupStep::kRecorded:
      return "recorded";
  }
  return "unknown";
}

std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::optional<std::string>& path_var) {
  if (program.find('/') != std::string::npos) return {program};
  std::string path = path_var.value_or(kDefaultPath);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    // An empty entry means the working directory, as in POSIX.
    out.push_back(dir.empty() ? program : dir + "/" + program);
    start = end + 1;
  }
  return out;
}

sys::Result<Launched> Launch(const LaunchRequest& request) {
  Sandbox* sandbox = request.sandbox;
  const bool namespaced = sandbox != nullptr && sandbox->namespaced();
  if (request.park && !namespaced) {
    return sys::Fail("launch: only a namespaced sandbox can be parked", EINVAL);
  }
  // Everything the child needs, allocated now.
  std::vector<std::string> candidates;
  if (!request.park) candidates = CandidatesOf(request);
  std::vector<const char*> candidate_ptrs;
  for (const auto& c : candidates) candidate_ptrs.push_back(c.c_str());
  candidate_ptrs.push_back(nullptr);
  std::vector<char*> argv;
  for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  CORDON_ASSIGN_OR_RETURN(sys::PipeFds out, sys::MakePipe());
  CORDON_ASSIGN_OR_RETURN(sys::PipeFds err, sys::MakePipe());
  CORDON_ASSIGN_OR_RETURN(sys::PipeFds setup, sys::MakePipe());
  // Where no cgroup holds the tree, the identity on_started records is all
  // that finds it again after a supervisor's crash: the child waits for
  // the record (a byte on `sync`, as a namespaced one waits for its id
  // maps). With a cgroup the record overlaps the child's setup.
  const bool held = request.cgroups != nullptr &&
                    (request.cgroups->clone_into_fd() >= 0 || !request.cgroups->join_fds().empty());
  const bool await_record = request.on_started && !held;
  sys::PipeFds sync;
  sys::PipeFds status;
  if (namespaced || await_record) {
    CORDON_ASSIGN_OR_RETURN(sync, sys::MakePipe());
  }
  if (namespaced) {
    CORDON_ASSIGN_OR_RETURN(status, sys::MakePipe());
  }
  sys::UniqueFd control[2];  // the supervisor's end, the init's
  if (request.park) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      return sys::FailErrno("socketpair(control)");
    }
    control[0].reset(pair[0]);
    control[1].reset(pair[1]);
  }
  sys::UniqueFd in;
  if (request.park) {
    // Its stdin comes with the command.
  } else if (request.stdin_fd >= 0) {
    in.reset(::fcntl(request.stdin_fd, F_DUPFD_CLOEXEC, 3));
    if (!in) return sys::FailErrno("fcntl(stdin_fd, F_DUPFD_CLOEXEC)");
  } else {
    CORDON_ASSIGN_OR_RETURN(in, StdinFd(request.stdin_bytes));
  }
  sys::UniqueFd workspace;
  if (request.workspace) {
    CORDON_ASSIGN_OR_RETURN(workspace, sys::Open(*request.workspace, O_PATH | O_DIRECTORY));
  }
  for (sys::UniqueFd* fd : {&out.write, &err.write, &in, &setup.write}) {
    if (*fd) CORDON_RETURN_IF_ERROR(LiftAbove2(*fd));
  }

  sys::UniqueFd lifted_exec;
  int exec_fd = request.exec_fd;
  if (exec_fd >= 0 && exec_fd <= 2) {
    lifted_exec.reset(::fcntl(exec_fd, F_DUPFD_CLOEXEC, 3));
    if (!lifted_exec) return sys::FailErrno("fcntl(F_DUPFD_CLOEXEC)");
    exec_fd = lifted_exec.get();
  }

  std::vector<int> join_fds;
  int cgroup_fd = -1;
  if (request.cgroups != nullptr) {
    for (const auto& fd : request.cgroups->join_fds()) join_fds.push_back(fd.get());
    cgroup_fd = request.cgroups->clone_into_fd();
  }
  ChildPlan plan{
      .error_fd = setup.write.get(),
      .join_fds = join_fds.data(),
      .join_count = join_fds.size(),
      .rlimits = request.rlimits.data(),
      .rlimit_count = request.rlimits.size(),
      .stdin_fd = in.get(),
      .stdout_fd = out.write.get(),
      .stderr_fd = err.write.get(),
      .workspace_fd = workspace ? workspace.get() : -1,
      .candidates = candidate_ptrs.data(),
      .exec_fd = exec_fd,
      .keep_exec_fd = request.exec_fd_is_script,
      .argv = argv.data(),
      .envp = envp.data(),
      .namespaced = namespaced,
      .await_record = await_record,
      .sync_fd = sync.read.get(),
      .sync_peer_fd = sync.write.get(),
      .status_fd = status.write.get(),
      .lease_fd = sandbox != nullptr ? sandbox->lease_fd() : -1,
      .new_network = namespaced && sandbox->new_network(),
      .mounts = namespaced ? sandbox->mounts()->steps() : nullptr,
      .mount_count = namespaced ? sandbox->mounts()->size() : 0,
      .cwd = namespaced ? kSandboxWorkspace : nullptr,
      .drop_privileges = sandbox != nullptr,
      .switch_ids = sandbox != nullptr && sandbox->switches_ids(),
      .ids = sandbox != nullptr ? OwnIds{sandbox->outside_uid(), sandbox->outside_gid()} : OwnIds{},
      .confined = false,
      .landlock = sandbox != nullptr ? sandbox->landlock() : nullptr,
      .seccomp = sandbox != nullptr ? sandbox->seccomp() : nullptr,
      .command_line = namespaced ? OwnCommandLine() : std::span<char>{},
      .environment = namespaced ? OwnEnvironment() : std::span<char>{},
      .control_fd = request.park ? control[1].get() : -1,
  };
  ChildMemory child_memory;
  if (!MoveOutOfHeap(plan, child_memory)) {
    return sys::Fail("launch: no memory for the child's plan", ENOMEM);
  }

  int pidfd = -1;
  struct clone_args args {};
  args.flags = CLONE_PIDFD | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0) |
               (namespaced ? sandbox->clone_flags() : 0);
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  args.cgroup = cgroup_fd >= 0 ? static_cast<uint64_t>(cgroup_fd) : 0;

  long pid;
  {
    HeapNotForked lean(child_memory);
    SignalBlock block;
    std::optional<NoSupplementaryGroups> no_groups;
    if (namespaced && ::geteuid() == 0) no_groups.emplace();
    pid = ::syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) ChildMain(plan);
  }
  if (pid < 0) {
    return sys::FailErrno(std::string("clone3(CLONE_PIDFD") +
                          (cgroup_fd >= 0 ? " | CLONE_INTO_CGROUP" : "") +
                          (namespaced ? " | namespaces" : "") + ")");
  }
  auto started = std::chrono::steady_clock::now();

  Launched launched;
  launched.pidfd = sys::PidFd(sys::UniqueFd(pidfd), static_cast<pid_t>(pid));
  launched.pgid = static_cast<pid_t>(pid);  // setsid made it a group leader
  launched.started = started;
  // The child's ends belong to it now.
  out.write.reset();
  err.write.reset();
  setup.write.reset();
  in.reset();
  control[1].reset();
  sync.read.reset();
  // The child's go-ahead; EOF without it (`sync` closed unwritten, on an
  // error here or the supervisor's death) tells it to give up.
  auto go = [&sync] {
    if (sync.write) (void)!::write(sync.write.get(), "1", 1);
    sync.write.reset();
  };
  if (namespaced) {
    // The child waits for its id maps (and its idmapped workspace) before
    // it touches anything.
    status.write.reset();
    auto entered = sandbox->Enter(launched.pidfd.pid());
    if (!entered) {
      sync.write.reset();
      (void)launched.pidfd.SendSignal(SIGKILL);
      (void)launched.pidfd.Reap();
      return std::unexpected(entered.error().Context("set up the user namespace"));
    }
    launched.init_report = std::move(status.read);
  }
  if (!await_record) go();

  auto finish = [&]() -> sys::Result<void> {
    // The child is ours and unreaped, so its pid cannot be recycled yet.
    CORDON_ASSIGN_OR_RETURN(launched.identity, proc::ReadIdentity(launched.pidfd.pid()));
    if (request.on_started) {
      auto recorded = request.on_started(launched.identity, launched.pgid);
      // Unrecorded, nothing would find the tree after a crash.
      if (!recorded && await_record) {
        return std::unexpected(recorded.error().Context("record the process"));
      }
    }
    go();  // recorded
    launched.sandbox = namespaced ? sandbox : nullptr;
    if (request.wait_for_exec && !request.park) {
      // Child setup is short and cannot block on us.
      launched.setup_report = std::move(setup.read);
      CORDON_RETURN_IF_ERROR(ReadSetupReport(launched));
    } else {
      CORDON_RETURN_IF_ERROR(sys::SetNonBlocking(setup.read.get()));
      launched.setup_report = std::move(setup.read);
    }
    CORDON_RETURN_IF_ERROR(sys::SetNonBlocking(out.read.get()));
    CORDON_RETURN_IF_ERROR(sys::SetNonBlocking(err.read.get()));
    return {};
  };
  if (auto done = finish(); !done) {
    // Do not leave a child nobody supervises: kill and reap it.
    (void)launched.pidfd.SendSignal(SIGKILL);
    (void)launched.pidfd.Reap();
    return std::unexpected(done.error());
  }
  launched.stdout_read = std::move(out.read);
  launched.stderr_read = std::move(err.read);
  launched.control = std::move(control[0]);
  return launched;
}

namespace {

// A parked init's command as SendCommand writes it (ParkedHeader); false
// when it does not fit what the init can take.
bool EncodeCommand(const LaunchRequest& command, ParkedHeader* header, std::string* bytes) {
  if (command.argv.empty()) return false;
  const std::vector<std::string> candidates = CandidatesOf(command);
  header->argc = static_cast<uint32_t>(command.argv.size());
  header->envc = static_cast<uint32_t>(command.env.size());
  header->candidate_count = static_cast<uint32_t>(candidates.size());
  header->rlimit_count = static_cast<uint32_t>(command.rlimits.size());
  bytes->assign(reinterpret_cast<const char*>(command.rlimits.data()),
                command.rlimits.size() * sizeof(RlimitSetting));
  for (const auto* list : {&command.argv, &command.env, &candidates}) {
    for (const std::string& item : *list) {
      bytes->append(item);
      bytes->push_back('\0');
    }
  }
  header->bytes = static_cast<uint32_t>(std::min<size_t>(bytes->size(), UINT32_MAX));
  return bytes->size() <= kParkedBytes &&
         command.argv.size() + command.env.size() + candidates.size() <= kParkedStrings &&
         command.rlimits.size() <= kParkedRlimits;
}

}  // namespace

bool FitsParked(const LaunchRequest& command) {
  ParkedHeader header{};
  std::string bytes;
  return EncodeCommand(command, &header, &bytes);
}

sys::Result<void> SendCommand(Launched& parked, const LaunchRequest& command) {
  if (!parked.control) return sys::Fail("send the command: the launch is not parked", EINVAL);
  ParkedHeader header{};
  std::string bytes;
  if (!EncodeCommand(command, &header, &bytes)) {
    return sys::Fail("send the command: it does not fit a parked sandbox", E2BIG);
  }
  sys::UniqueFd in;
  if (command.stdin_fd >= 0) {
    in.reset(::fcntl(command.stdin_fd, F_DUPFD_CLOEXEC, 3));
    if (!in) return sys::FailErrno("fcntl(stdin_fd, F_DUPFD_CLOEXEC)");
  } else {
    CORDON_ASSIGN_OR_RETURN(in, StdinFd(command.stdin_bytes));
  }
  struct iovec iov {
    &header, sizeof header
  };
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  const int fd = in.get();
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  // Blocking: the init is waiting for it, and reads as fast as it comes.
  CORDON_RETURN_IF_ERROR(sys::SetNonBlocking(parked.control.get(), false));
  ssize_t sent;
  do {
    sent = ::sendmsg(parked.control.get(), &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return sys::FailErrno("send the command (sendmsg)");
  // A stream socket takes a 20-byte header whole, or nothing.
  if (static_cast<size_t>(sent) != sizeof header) {
    return sys::Fail("send the command: the header was cut short", EIO);
  }
  if (auto written = sys::WriteAll(parked.control.get(), bytes); !written) {
    return std::unexpected(written.error().Context("send the command"));
  }
  parked.control.reset();
  parked.started = std::chrono::steady_clock::now();
  return {};
}

sys::Result<void> ReadSetupReport(Launched& launched) {
  if (!launched.setup_report) return {};
  // EOF means execve succeeded (the pipe is close-on-exec); a record means
  // a step failed; EAGAIN (a report opened non-blocking) that the child is
  // still setting up: ask again later.
  SetupRecord record{};
  ssize_t n;
  do {
    n = ::read(launched.setup_report.get(), &record, sizeof record);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return {};
  if (n < 0) return sys::FailErrno("read(setup report)");
  if (n == sizeof record) {
    launched.setup_error = SetupError{static_cast<SetupStep>(record.step), record.err, ""};
    if (record.step == static_cast<int32_t>(SetupStep::kMounts) && launched.sandbox &&
        launched.sandbox->mounts()) {
      launched.setup_error->detail =
          launched.sandbox->mounts()->Describe(static_cast<size_t>(record.index));
    }
  }
  launched.setup_report.reset();
  return {};
}

}  // namespace cordon::contain
