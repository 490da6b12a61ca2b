#include "contain/seccomp.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "sys/fd.h"

namespace cordon::contain {
namespace {

// `mask` that compares the whole argument for inequality instead.
constexpr uint64_t kNotEqual = 0;

// One refusal. `arg` < 0: every call; otherwise only calls whose argument
// `arg`, masked with `mask`, equals `value` (with kNotEqual: differs from it).
struct Deny {
  const char* name;
  const char* reason;
  int arg = -1;
  uint64_t mask = 0;
  uint64_t value = 0;
  int err = EPERM;
};

// The table. Each entry is a way out of the sandbox or into the kernel's
// less-travelled code; none is something an ordinary program needs.
const Deny kDenied[] = {
    // Reading or steering another process.
    {"ptrace", "inspect and control another process"},
    {"process_vm_readv", "read another process's memory"},
    {"process_vm_writev", "write another process's memory"},
    {"kcmp", "compare kernel objects of other processes (an information leak)"},
    {"pidfd_getfd", "take a descriptor out of another process"},
    // Changing the filesystem view the sandbox was given.
    {"mount", "change the filesystem view"},
    {"umount2", "uncover what a mount hides"},
    {"pivot_root", "change the root"},
    {"chroot", "change the root"},
    {"move_mount", "change the filesystem view (new mount API)"},
    {"open_tree", "copy a mount tree (new mount API)"},
    {"fsopen", "create a filesystem context (new mount API)"},
    {"fsconfig", "configure a filesystem context (new mount API)"},
    {"fsmount", "mount a filesystem context (new mount API)"},
    {"fspick", "reconfigure a mounted filesystem (new mount API)"},
    {"mount_setattr", "make a read-only mount writable"},
    // New namespaces: a nested user namespace brings back every capability
    // and with it much of the kernel's attack surface.
    {"unshare", "new namespaces, a nested user namespace above all"},
    {"setns", "join another namespace"},
    {"clone", "new namespaces through clone", 0, CLONE_NEWUSER, CLONE_NEWUSER},
    {"clone", "new namespaces through clone", 0, CLONE_NEWNS, CLONE_NEWNS},
    {"clone", "new namespaces through clone", 0, CLONE_NEWPID, CLONE_NEWPID},
    {"clone", "new namespaces through clone", 0, CLONE_NEWNET, CLONE_NEWNET},
    {"clone", "new namespaces through clone", 0, CLONE_NEWIPC, CLONE_NEWIPC},
    {"clone", "new namespaces through clone", 0, CLONE_NEWUTS, CLONE_NEWUTS},
    {"clone", "new namespaces through clone", 0, CLONE_NEWCGROUP, CLONE_NEWCGROUP},
    // clone3 passes its flags in memory, which a filter cannot read. ENOSYS
    // makes the C library fall back to clone, whose flags are checked above.
    {"clone3", "flags out of the filter's sight; libc falls back to clone", -1, 0, 0, ENOSYS},
    // The kernel's own extension points.
    {"bpf", "load programs into the kernel"},
    {"perf_event_open", "kernel profiling: a large attack surface and side channels"},
    {"userfaultfd", "stall the kernel at will, a staple of exploits"},
    {"io_uring_setup", "a second system call interface that bypasses this filter"},
    {"io_uring_enter", "a second system call interface that bypasses this filter"},
    {"io_uring_register", "a second system call interface that bypasses this filter"},
    {"init_module", "load a kernel module"},
    {"finit_module", "load a kernel module"},
    {"delete_module", "unload a kernel module"},
    {"kexec_load", "replace the running kernel"},
    {"kexec_file_load", "replace the running kernel"},
    // Keys are not namespaced: the host's keyrings would be in reach.
    {"keyctl", "the kernel keyring is not namespaced"},
    {"add_key", "the kernel keyring is not namespaced"},
    {"request_key", "the kernel keyring is not namespaced"},
    // The machine itself.
    {"reboot", "restart or halt the machine"},
    {"swapon", "change the machine's swap"},
    {"swapoff", "change the machine's swap"},
    {"acct", "process accounting for the whole machine"},
    {"syslog", "read the kernel log"},
    {"open_by_handle_at", "open files by handle, bypassing the mount view"},
    {"name_to_handle_at", "file handles are half of open_by_handle_at"},
    {"lookup_dcookie", "kernel profiling internals"},
    {"iopl", "direct hardware port access"},
    {"ioperm", "direct hardware port access"},
    {"uselib", "an obsolete loader path"},
    {"vhangup", "hang up the terminal"},
    // personality flags switch ASLR off or make data executable; only the
    // default persona (PER_LINUX, 0) may be set.
    {"personality", "switch ASLR off or make data executable", 0, kNotEqual, 0},
    // Typing into the terminal cordon was started from.
    {"ioctl", "push characters into a terminal's input (TIOCSTI)", 1, 0xffffffffu, TIOCSTI},
    {"ioctl", "console tricks, among them pasting a selection (TIOCLINUX)", 1, 0xffffffffu,
     TIOCLINUX},
    // Memory-layout calls that flatpak and Docker deny as attack surface:
    // a segment table of one's own (modify_ldt, behind several escalations)
    // and NUMA page placement, which no sandboxed program needs.
    {"modify_ldt", "a per-process segment table: old, rarely used kernel code"},
    {"move_pages", "NUMA page moves: attack surface nothing here needs"},
    {"mbind", "NUMA memory policy: attack surface nothing here needs"},
    {"migrate_pages", "NUMA page moves of a whole process"},
    // The clock is the machine's, not the namespace's. (adjtimex stays:
    // reading the clock's state through it needs no privilege, and the
    // kernel refuses its writes without CAP_SYS_TIME of the host.)
    {"clock_settime", "set the machine's clock"},
    {"settimeofday", "set the machine's clock"},
    // Set-user-id and set-group-id files. As root, the workspace is
    // idmapped so that its owner outside is the sandbox's root: for a root
    // caller's workspace that owner is root, and a file the command marks
    // set-uid there is a set-uid-root program on the host, whoever runs it
    // (CVE-2018-13405's class). The owner needs no capability to set the
    // bit, so the filter refuses the modes: on chmod, and on every call that
    // creates a file with a mode (the kernel reads open's mode only with
    // O_CREAT or O_TMPFILE, and the C library passes 0 otherwise).
    {"chmod", "make a set-uid file", 1, S_ISUID, S_ISUID},
    {"chmod", "make a set-gid file", 1, S_ISGID, S_ISGID},
    {"fchmod", "make a set-uid file", 1, S_ISUID, S_ISUID},
    {"fchmod", "make a set-gid file", 1, S_ISGID, S_ISGID},
    {"fchmodat", "make a set-uid file", 2, S_ISUID, S_ISUID},
    {"fchmodat", "make a set-gid file", 2, S_ISGID, S_ISGID},
    {"fchmodat2", "make a set-uid file", 2, S_ISUID, S_ISUID},
    {"fchmodat2", "make a set-gid file", 2, S_ISGID, S_ISGID},
    {"creat", "create a set-uid file", 1, S_ISUID, S_ISUID},
    {"creat", "create a set-gid file", 1, S_ISGID, S_ISGID},
    {"open", "create a set-uid file", 2, S_ISUID, S_ISUID},
    {"open", "create a set-gid file", 2, S_ISGID, S_ISGID},
    {"openat", "create a set-uid file", 3, S_ISUID, S_ISUID},
    {"openat", "create a set-gid file", 3, S_ISGID, S_ISGID},
    {"mknod", "create a set-uid file", 1, S_ISUID, S_ISUID},
    {"mknod", "create a set-gid file", 1, S_ISGID, S_ISGID},
    {"mknodat", "create a set-uid file", 2, S_ISUID, S_ISUID},
    {"mknodat", "create a set-gid file", 2, S_ISGID, S_ISGID},
    // openat2 passes its mode in memory, which a filter cannot read. ENOSYS
    // makes its callers fall back to openat, whose mode is checked above.
    {"openat2", "its mode is out of the filter's sight; callers fall back to openat", -1, 0, 0,
     ENOSYS},
};

// A refusal that compares up to two arguments (all must match).
struct SocketDeny {
  const char* name;
  const char* reason;
  int err;
  int count;
  struct scmp_arg_cmp cmp[2];
};

constexpr uint64_t kTypeMask = 0xf;  // SOCK_TYPE_MASK: the flags above it do not count

// With isolation (standard and strict): no raw IP sockets (packet crafting,
// sniffing what the namespace sees), no ping sockets (ICMP through the
// kernel's own code, CVE-2015-3636 class). Not added where the IP families
// are refused whole: libseccomp refuses a rule narrower than one it has.
const SocketDeny kIpSocketDenied[] = {
    {"socket",
     "raw IPv4 sockets",
     EPERM,
     2,
     {SCMP_A0(SCMP_CMP_EQ, AF_INET), SCMP_A1(SCMP_CMP_MASKED_EQ, kTypeMask, SOCK_RAW)}},
    {"socket",
     "raw IPv6 sockets",
     EPERM,
     2,
     {SCMP_A0(SCMP_CMP_EQ, AF_INET6), SCMP_A1(SCMP_CMP_MASKED_EQ, kTypeMask, SOCK_RAW)}},
    {"socket",
     "ICMP (ping) sockets",
     EPERM,
     2,
     {SCMP_A0(SCMP_CMP_EQ, AF_INET), SCMP_A2(SCMP_CMP_EQ, IPPROTO_ICMP)}},
    {"socket",
     "ICMPv6 (ping) sockets",
     EPERM,
     2,
     {SCMP_A0(SCMP_CMP_EQ, AF_INET6), SCMP_A2(SCMP_CMP_EQ, IPPROTO_ICMPV6)}},
};

// Whatever the families: no packet sockets of the obsolete SOCK_PACKET
// type, and socket pairs of AF_UNIX only.
const SocketDeny kSocketDenied[] = {
    {"socket",
     "packet sockets (SOCK_PACKET)",
     EPERM,
     1,
     {SCMP_A1(SCMP_CMP_MASKED_EQ, kTypeMask, SOCK_PACKET)}},
    // socketpair creates sockets of its family as socket does (and loads
    // its module, AF_TIPC's among them); only AF_UNIX has pairs worth having.
    {"socketpair",
     "socket pairs of families other than AF_UNIX",
     EAFNOSUPPORT,
     1,
     {SCMP_A0(SCMP_CMP_NE, AF_UNIX)}},
};

// standard keeps route netlink (interface and address queries, which
// glibc's getaddrinfo makes); every other netlink protocol is refused,
// NETLINK_NETFILTER (nf_tables, CVE-2024-1086) above all.
const SocketDeny kStandardNetlink = {
    "socket",
    "netlink protocols other than NETLINK_ROUTE",
    EPROTONOSUPPORT,
    2,
    {SCMP_A0(SCMP_CMP_EQ, AF_NETLINK), SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE)}};

// strict: no raw sockets of any family. (Netlink, whose sockets are raw
// too, is refused whole in strict, with its own errno: AllowOnlyFamilies.)
const SocketDeny kStrictRaw = {
    "socket",
    "raw sockets",
    EPERM,
    2,
    {SCMP_A0(SCMP_CMP_NE, AF_NETLINK), SCMP_A1(SCMP_CMP_MASKED_EQ, kTypeMask, SOCK_RAW)}};

// Socket families that stay allowed: everything else is refused, the
// families the kernel would load a module for (AF_RDS, CVE-2010-3904;
// AF_TIPC; AF_KEY), AF_ALG, AF_PACKET and AF_VSOCK among them. vsock
// above all: the network namespace does not confine it, and on a VM host
// (Firecracker, Kata, cloud VMs) CID 2 is the host.
constexpr int kStandardFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
constexpr int kStrictFamilies[] = {AF_UNIX, AF_INET, AF_INET6};
constexpr int kUnixOnly[] = {AF_UNIX};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

sys::Result<void> Add(scmp_filter_ctx ctx, const Deny& d) {
  int nr = seccomp_syscall_resolve_name(d.name);
  if (nr == __NR_SCMP_ERROR) return sys::Fail(std::string("unknown system call ") + d.name, EINVAL);
  int rc;
  if (d.arg < 0) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(d.err), nr, 0);
  } else {
    auto arg = static_cast<unsigned>(d.arg);
    struct scmp_arg_cmp cmp = d.mask == kNotEqual
                                  ? SCMP_CMP(arg, SCMP_CMP_NE, d.value)
                                  : SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, d.mask, d.value);
    rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(d.err), nr, 1, &cmp);
  }
  if (rc != 0) return sys::Fail(std::string("seccomp_rule_add(") + d.name + ")", -rc);
  return {};
}

sys::Result<void> Add(scmp_filter_ctx ctx, const SocketDeny& d) {
  int nr = seccomp_syscall_resolve_name(d.name);
  if (nr == __NR_SCMP_ERROR) return sys::Fail(std::string("unknown system call ") + d.name, EINVAL);
  int rc =
      seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(d.err), nr, static_cast<unsigned>(d.count), d.cmp);
  if (rc != 0) return sys::Fail(std::string("seccomp_rule_add(") + d.name + ")", -rc);
  return {};
}

// socket(family, ...) for every family not in `allowed` (families are small
// numbers; AF_MAX bounds them): one rule per range, since a rule compares
// an argument once.
sys::Result<void> AllowOnlyFamilies(scmp_filter_ctx ctx, const int* allowed, size_t count) {
  int nr = SCMP_SYS(socket);
  auto is_allowed = [&](int f) {
    for (size_t i = 0; i < count; ++i) {
      if (allowed[i] == f) return true;
    }
    return false;
  };
  for (int family = 0; family < AF_MAX; ++family) {
    if (is_allowed(family)) continue;
    // Refused netlink is EOPNOTSUPP: glibc's getifaddrs opens a route
    // netlink socket and passes its errno on, and libzmq (ipykernel binds
    // its subprocess pipe on tcp://127.0.0.1) aborts the kernel on any
    // getifaddrs error but EINVAL and EOPNOTSUPP.
    const int err = family == AF_NETLINK ? EOPNOTSUPP : EAFNOSUPPORT;
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 1,
                              SCMP_A0(SCMP_CMP_EQ, static_cast<uint64_t>(family)));
    if (rc != 0) return sys::Fail("seccomp_rule_add(socket)", -rc);
  }
  int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                            SCMP_A0(SCMP_CMP_GE, static_cast<uint64_t>(AF_MAX)));
  if (rc != 0) return sys::Fail("seccomp_rule_add(socket)", -rc);
  return {};
}

}  // namespace

bool KnownSyscall(const std::string& name) {
  return seccomp_syscall_resolve_name(name.c_str()) != __NR_SCMP_ERROR;
}

bool SeccompAvailable() { return ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0; }

sys::Result<std::vector<struct sock_filter>> CompileSeccomp(const SeccompOptions& options) {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return sys::Fail("seccomp_init", ENOMEM);
  // A system call of another ABI (int 0x80 on x86-64) would bypass the
  // table: refuse them all. (x32 numbers, bit 30 on x86-64, libseccomp
  // sends to the same action.)
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
      rc != 0) {
    return sys::Fail("seccomp_attr_set(ACT_BADARCH)", -rc);
  }
  for (const Deny& d : kDenied) CORDON_RETURN_IF_ERROR(Add(ctx.get(), d));
  if (options.strict) {
    CORDON_RETURN_IF_ERROR(Add(ctx.get(), kStrictRaw));
  }
  for (const SocketDeny& d : kSocketDenied) CORDON_RETURN_IF_ERROR(Add(ctx.get(), d));
  if (!options.unix_sockets_only) {
    for (const SocketDeny& d : kIpSocketDenied) CORDON_RETURN_IF_ERROR(Add(ctx.get(), d));
  }
  // The family compared is the whole 64-bit argument, though the kernel
  // reads an int: a family with high bits set is >= AF_MAX, so refused,
  // never truncated into an allowed one.
  if (options.unix_sockets_only) {
    CORDON_RETURN_IF_ERROR(AllowOnlyFamilies(ctx.get(), kUnixOnly, std::size(kUnixOnly)));
  } else if (options.strict) {
    CORDON_RETURN_IF_ERROR(
        AllowOnlyFamilies(ctx.get(), kStrictFamilies, std::size(kStrictFamilies)));
  } else {
    CORDON_RETURN_IF_ERROR(
        AllowOnlyFamilies(ctx.get(), kStandardFamilies, std::size(kStandardFamilies)));
    CORDON_RETURN_IF_ERROR(Add(ctx.get(), kStandardNetlink));
  }
  for (const auto& name : options.extra_deny) {
    CORDON_RETURN_IF_ERROR(Add(ctx.get(), Deny{name.c_str(), "denied by the policy"}));
  }

  // libseccomp 2.5 exports to a descriptor only.
  int raw = ::memfd_create("cordon-seccomp", MFD_CLOEXEC);
  if (raw < 0) return sys::FailErrno("memfd_create");
  sys::UniqueFd memfd(raw);
  if (int rc = seccomp_export_bpf(ctx.get(), raw); rc != 0) {
    return sys::Fail("seccomp_export_bpf", -rc);
  }
  if (::lseek(raw, 0, SEEK_SET) != 0) return sys::FailErrno("lseek(seccomp memfd)");
  CORDON_ASSIGN_OR_RETURN(std::string bytes, sys::ReadAll(raw, 1 << 20));
  if (bytes.empty() || bytes.size() % sizeof(struct sock_filter) != 0) {
    return sys::Fail("seccomp_export_bpf: unexpected program size " + std::to_string(bytes.size()),
                     EINVAL);
  }
  std::vector<struct sock_filter> code(bytes.size() / sizeof(struct sock_filter));
  std::memcpy(code.data(), bytes.data(), bytes.size());
  return code;
}

namespace {

// The build's program for `options`, if it has one and this process links
// the libseccomp that compiled it.
std::vector<struct sock_filter> Precompiled(const SeccompOptions& options) {
  const PrecompiledSeccompSet& set = kPrecompiledSeccomp;
  const struct scmp_version* linked = seccomp_version();
  if (!options.extra_deny.empty() || linked == nullptr || linked->major != set.major ||
      linked->minor != set.minor || linked->micro != set.micro) {
    return {};
  }
  for (size_t i = 0; i < set.count; ++i) {
    const PrecompiledSeccomp& p = set.programs[i];
    if (p.strict == options.strict && p.unix_sockets_only == options.unix_sockets_only) {
      return {p.code, p.code + p.size};
    }
  }
  return {};
}

// Programs compiled here, by their options: those with a policy's names
// (or all, under a libseccomp other than the build's). libseccomp takes
// about as long to compile the table as the rest of a sandbox's
// preparation, and a daemon asks for the same few filters for every
// sandbox it makes. Bounded: the options come from policies, and a daemon
// has a handful.
constexpr size_t kMaxCached = 32;
std::mutex cache_mutex;
std::map<SeccompOptions, std::vector<struct sock_filter>> cache;

}  // namespace

sys::Result<SeccompFilter> SeccompFilter::Build(const SeccompOptions& options) {
  SeccompFilter f;
  f.code_ = Precompiled(options);
  if (f.code_.empty()) {
    std::lock_guard lock(cache_mutex);
    if (auto it = cache.find(options); it != cache.end()) f.code_ = it->second;
  }
  if (f.code_.empty()) {
    CORDON_ASSIGN_OR_RETURN(f.code_, CompileSeccomp(options));
    std::lock_guard lock(cache_mutex);
    if (cache.size() >= kMaxCached) cache.erase(cache.begin());
    cache.emplace(options, f.code_);
  }
  f.program_.len = static_cast<unsigned short>(f.code_.size());
  f.program_.filter = f.code_.data();
  return f;
}

int InstallSeccomp(const struct sock_fprog* program) {
  if (program == nullptr) return 0;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program, 0, 0) == 0 ? 0 : errno;
}

}  // namespace cordon::contain
