// seccomp-bpf: the system calls a sandbox may not make, in one table with
// the reason for each (seccomp.cc), compiled with libseccomp (as cordon is
// built, for every filter without a policy's names; else in the
// supervisor) and installed by the child as the very last step before
// execve. A refused call fails with EPERM (ENOSYS for clone3): the program
// sees an error it can handle, and is not killed.
#pragma once

#include <linux/filter.h>

#include <compare>
#include <string>
#include <vector>

#include "sys/error.h"

namespace cordon::contain {

struct SeccompOptions {
  // Both levels refuse raw IP, packet and ping sockets. standard allows
  // the families AF_UNIX, AF_INET, AF_INET6 and route netlink only;
  // strict only AF_UNIX, AF_INET and AF_INET6, and no raw socket at all.
  bool strict = false;
  // No network namespace could be made but no network was asked for:
  // refuse every socket family but AF_UNIX.
  bool unix_sockets_only = false;
  std::vector<std::string> extra_deny;  // names from the policy (seccomp.deny)
  // Whole: compiled programs are kept by their options (Build).
  auto operator<=>(const SeccompOptions&) const = default;
};

// A compiled filter. Move-only; `program()` stays valid while it lives.
class SeccompFilter final {
 public:
  static sys::Result<SeccompFilter> Build(const SeccompOptions& options);
  SeccompFilter(SeccompFilter&&) noexcept = default;
  SeccompFilter& operator=(SeccompFilter&&) noexcept = default;

  const struct sock_fprog* program() const { return &program_; }
  size_t instructions() const { return code_.size(); }

 private:
  SeccompFilter() = default;
  std::vector<struct sock_filter> code_;
  struct sock_fprog program_ {};
};

// What libseccomp compiles for `options` now, uncached. (Build keeps what
// it compiles, and starts from what the build compiled.)
sys::Result<std::vector<struct sock_filter>> CompileSeccomp(const SeccompOptions& options);

// Programs compiled when cordon was built (src/tools/seccomp_gen.cc writes
// them, with the libseccomp cordon links, for each level with and without
// a network namespace, no policy names), so that a one-shot run does not
// pay libseccomp's code generator (about a tenth of its launch). Build
// takes one only from the libseccomp version that compiled it: a shared
// libseccomp upgraded since compiles its own.
struct PrecompiledSeccomp {
  bool strict;
  bool unix_sockets_only;
  const struct sock_filter* code;
  size_t size;
};
struct PrecompiledSeccompSet {
  unsigned major, minor, micro;  // the libseccomp that compiled them
  const PrecompiledSeccomp* programs;
  size_t count;
};
extern const PrecompiledSeccompSet kPrecompiledSeccomp;

// Whether libseccomp knows `name` as a system call of this architecture.
bool KnownSyscall(const std::string& name);

// Whether this kernel accepts seccomp filters (PR_GET_SECCOMP answers).
bool SeccompAvailable();

// Child side, async-signal-safe: installs `program` for this thread and
// its descendants. Returns 0 or an errno value.
int InstallSeccomp(const struct sock_fprog* program);

}  // namespace cordon::contain
