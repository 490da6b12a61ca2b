#include "contain/seccomp.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

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
};

// strict: no raw sockets (packet crafting, sniffing of what the namespace sees).
const Deny kStrictDenied[] = {
    {"socket", "raw sockets", 1, 0xf, SOCK_RAW},
    {"socket", "packet sockets", 1, 0xf, SOCK_PACKET},
};

// Socket families that stay allowed: everything else is refused.
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
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
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

sys::Result<SeccompFilter> SeccompFilter::Build(const SeccompOptions& options) {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return sys::Fail("seccomp_init", ENOMEM);
  // A system call of another ABI (int 0x80 on x86-64) would bypass the
  // table: refuse them all.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
      rc != 0) {
    return sys::Fail("seccomp_attr_set(ACT_BADARCH)", -rc);
  }
  for (const Deny& d : kDenied) CORDON_RETURN_IF_ERROR(Add(ctx.get(), d));
  if (options.strict) {
    for (const Deny& d : kStrictDenied) CORDON_RETURN_IF_ERROR(Add(ctx.get(), d));
  }
  if (options.unix_sockets_only) {
    CORDON_RETURN_IF_ERROR(AllowOnlyFamilies(ctx.get(), kUnixOnly, std::size(kUnixOnly)));
  } else if (options.strict) {
    CORDON_RETURN_IF_ERROR(
        AllowOnlyFamilies(ctx.get(), kStrictFamilies, std::size(kStrictFamilies)));
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
  SeccompFilter f;
  f.code_.resize(bytes.size() / sizeof(struct sock_filter));
  std::memcpy(f.code_.data(), bytes.data(), bytes.size());
  f.program_.len = static_cast<unsigned short>(f.code_.size());
  f.program_.filter = f.code_.data();
  return f;
}

int InstallSeccomp(const struct sock_fprog* program) {
  if (program == nullptr) return 0;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program, 0, 0) == 0 ? 0 : errno;
}

}  // namespace cordon::contain
