#include "contain/seccomp.h"

#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace cordon::contain {
namespace {

// Runs `body` in a forked child under `filter`; returns what it returned
// (its exit status), or -1 if it did not exit normally.
int UnderFilter(const SeccompFilter& filter, int (*body)()) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(100);
    if (InstallSeccomp(filter.program()) != 0) ::_exit(101);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SeccompTest, TheTableRefusesWithAnErrorInsteadOfKilling) {
  auto filter = SeccompFilter::Build({});
  ASSERT_TRUE(filter) << filter.error().message();
  EXPECT_GT(filter->instructions(), 10u);
  EXPECT_EQ(UnderFilter(*filter, [] { return ::syscall(SYS_ptrace, 0, 0, 0, 0) < 0 ? errno : 0; }),
            EPERM);
  EXPECT_EQ(UnderFilter(*filter, [] { return ::unshare(CLONE_NEWUSER) < 0 ? errno : 0; }), EPERM);
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          struct clone_args a {};
                          return ::syscall(SYS_clone3, &a, sizeof a) < 0 ? errno : 0;
                        }),
            ENOSYS);  // libc falls back to clone, whose flags the filter sees
  // Only the default persona may be set.
  EXPECT_EQ(UnderFilter(*filter, [] { return ::personality(ADDR_NO_RANDOMIZE) < 0 ? errno : 0; }),
            EPERM);
  EXPECT_EQ(UnderFilter(*filter, [] { return ::personality(PER_LINUX) < 0 ? errno : 0; }), 0);
  // What ordinary programs do still works: fork, and sockets in standard.
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          pid_t p = ::fork();
                          if (p == 0) ::_exit(0);
                          return p > 0 && ::waitpid(p, nullptr, 0) == p ? 0 : 1;
                        }),
            0);
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          int fd = ::socket(AF_INET, SOCK_STREAM, 0);
                          return fd < 0 ? errno : 0;
                        }),
            0);
}

// An i386 system call through int 0x80 from this x86-64 process. A kernel
// built without IA32 emulation (or booted with ia32_emulation=off) faults
// the instruction itself, before any filter sees it: kNoI386 then.
constexpr long kNoI386 = 1000;
sigjmp_buf int80_fault;
void Int80Fault(int) { ::siglongjmp(int80_fault, 1); }

[[maybe_unused]] long Int80(long nr, long a) {
  long rc = -ENOSYS;
#if defined(__x86_64__)
  struct sigaction fault {
  }, old{};
  fault.sa_handler = Int80Fault;
  ::sigaction(SIGSEGV, &fault, &old);
  if (::sigsetjmp(int80_fault, 1) != 0) {
    ::sigaction(SIGSEGV, &old, nullptr);
    return -kNoI386;
  }
  __asm__ volatile("int $0x80" : "=a"(rc) : "a"(nr), "b"(a), "c"(0L), "d"(0L) : "memory");
  ::sigaction(SIGSEGV, &old, nullptr);
#endif
  return rc;
}

// Whether this host runs i386 system calls at all: getpid through int 0x80,
// in a child, with no filter.
bool HostHasI386() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(Int80(20, 0) > 0 ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(SeccompTest, StandardAllowsOnlyInternetUnixAndRouteNetlinkSockets) {
  auto filter = SeccompFilter::Build({});
  ASSERT_TRUE(filter) << filter.error().message();
  auto made = [](int family, int type, int protocol) {
    int fd = ::socket(family, type | SOCK_CLOEXEC, protocol);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
  };
  // Refused by the filter, whatever the kernel would have said.
  EXPECT_EQ(UnderFilter(*filter, [] { return ::socket(AF_VSOCK, SOCK_STREAM, 0) < 0 ? errno : 0; }),
            EAFNOSUPPORT);
  EXPECT_EQ(
      UnderFilter(*filter, [] { return ::socket(AF_ALG, SOCK_SEQPACKET, 0) < 0 ? errno : 0; }),
      EAFNOSUPPORT);
  EXPECT_EQ(
      UnderFilter(*filter, [] { return ::socket(AF_PACKET, SOCK_RAW, 0x300) < 0 ? errno : 0; }),
      EAFNOSUPPORT);
  EXPECT_EQ(
      UnderFilter(*filter,
                  [] { return ::socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER) < 0 ? errno : 0; }),
      EPROTONOSUPPORT);
  EXPECT_EQ(UnderFilter(*filter, [] { return ::socket(AF_INET, SOCK_RAW, 1) < 0 ? errno : 0; }),
            EPERM);
  EXPECT_EQ(UnderFilter(*filter,
                        [] { return ::socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP) < 0 ? errno : 0; }),
            EPERM);  // ping
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          int pair[2];
                          return ::socketpair(AF_TIPC, SOCK_DGRAM, 0, pair) < 0 ? errno : 0;
                        }),
            EAFNOSUPPORT);
  // A family with high bits set, which the kernel would truncate to an int.
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          return ::syscall(SYS_socket, (1L << 32) | AF_VSOCK, SOCK_STREAM, 0) < 0
                                     ? errno
                                     : 0;
                        }),
            EAFNOSUPPORT);
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          return ::syscall(SYS_socket, (1L << 32) | AF_INET, SOCK_STREAM, 0) < 0
                                     ? errno
                                     : 0;
                        }),
            EAFNOSUPPORT);
  // What stays: Unix, IP and route netlink sockets (in this namespace,
  // where the kernel makes them).
  static int (*s_made)(int, int, int) = made;
  EXPECT_EQ(UnderFilter(*filter, [] { return s_made(AF_UNIX, SOCK_STREAM, 0); }), 0);
  EXPECT_EQ(UnderFilter(*filter, [] { return s_made(AF_INET, SOCK_DGRAM, 0); }), 0);
  EXPECT_EQ(UnderFilter(*filter, [] { return s_made(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE); }), 0);
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          int pair[2];
                          return ::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0 ? errno : 0;
                        }),
            0);
}

// No network namespace and no network asked for: AF_UNIX alone, and the
// overlapping rules (families, raw IP sockets) still build.
TEST(SeccompTest, WithoutANetworkNamespaceOnlyUnixSocketsRemain) {
  for (bool strict : {false, true}) {
    auto filter = SeccompFilter::Build({.strict = strict, .unix_sockets_only = true});
    ASSERT_TRUE(filter) << filter.error().message();
    EXPECT_EQ(
        UnderFilter(*filter, [] { return ::socket(AF_INET, SOCK_STREAM, 0) < 0 ? errno : 0; }),
        EAFNOSUPPORT);
    EXPECT_EQ(
        UnderFilter(*filter,
                    [] { return ::socket(AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE) < 0 ? errno : 0; }),
        EOPNOTSUPP);  // what libzmq's getifaddrs call survives (seccomp.cc)
    EXPECT_EQ(UnderFilter(*filter,
                          [] {
                            return ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE) < 0
                                       ? errno
                                       : 0;
                          }),
              EOPNOTSUPP);
    EXPECT_EQ(UnderFilter(*filter,
                          [] {
                            int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
                            return fd < 0 ? errno : 0;
                          }),
              0);
  }
}

TEST(SeccompTest, MemoryLayoutAndClockCallsAreRefusedInBothLevels) {
  for (bool strict : {false, true}) {
    auto filter = SeccompFilter::Build({.strict = strict});
    ASSERT_TRUE(filter) << filter.error().message();
    for (long nr : {SYS_modify_ldt, SYS_move_pages, SYS_mbind, SYS_migrate_pages, SYS_clock_settime,
                    SYS_settimeofday}) {
      static long s_nr;
      s_nr = nr;
      EXPECT_EQ(
          UnderFilter(*filter, [] { return ::syscall(s_nr, 0, 1, 1, 1, 1, 0) < 0 ? errno : 0; }),
          EPERM)
          << "system call " << nr << (strict ? " (strict)" : " (standard)");
    }
  }
}

TEST(SeccompTest, TheI386AbiIsRefusedWhole) {
  if (!HostHasI386()) {
    GTEST_SKIP() << "this kernel has no IA32 emulation: int 0x80 faults before any filter runs";
  }
  auto filter = SeccompFilter::Build({});
  ASSERT_TRUE(filter) << filter.error().message();
  // getpid (20) as the control, which succeeds unfiltered (HostHasI386);
  // ptrace (26), mount (21), unshare (310).
  for (long nr : {20L, 26L, 21L, 310L}) {
    static long s_nr;
    s_nr = nr;
    EXPECT_EQ(UnderFilter(*filter, [] { return static_cast<int>(-Int80(s_nr, 0x10000000)); }),
              ENOSYS)
        << "i386 system call " << nr;
  }
}

TEST(SeccompTest, TheX32AbiIsRefusedWhole) {
  auto filter = SeccompFilter::Build({});
  ASSERT_TRUE(filter) << filter.error().message();
  // x32 numbers (bit 30): ptrace, mount, unshare. (libseccomp's x86-64
  // filter sends every number with bit 30 to the bad-arch action.)
  for (long nr : {521L, 165L, 272L}) {
    static long s_nr;
    s_nr = nr;
    EXPECT_EQ(
        UnderFilter(*filter, [] { return ::syscall(0x40000000L | s_nr, 0, 0, 0) < 0 ? errno : 0; }),
        ENOSYS)
        << "x32 system call " << nr;
  }
}

// flatpak's tests/test-seccomp.sh: calls both sandboxes allow, with bad
// arguments, fail as the kernel fails them (not EPERM from the filter).
TEST(SeccompTest, CallsFlatpakAllowsAreNotOverBlocked) {
  for (bool strict : {false, true}) {
    auto filter = SeccompFilter::Build({.strict = strict});
    ASSERT_TRUE(filter) << filter.error().message();
    auto* bad = reinterpret_cast<char*>(1);
    static char* s_bad = bad;
    EXPECT_EQ(UnderFilter(*filter, [] { return ::chmod(s_bad, 0700) < 0 ? errno : 0; }), EFAULT);
    EXPECT_EQ(UnderFilter(*filter, [] { return ::listen(-1, 42) < 0 ? errno : 0; }), EBADF);
    EXPECT_EQ(
        UnderFilter(*filter,
                    [] { return ::prctl(PR_GET_CHILD_SUBREAPER, s_bad, 0, 0, 0) < 0 ? errno : 0; }),
        EFAULT);
    EXPECT_EQ(UnderFilter(*filter, [] { return ::ioctl(-1, TIOCNOTTY) < 0 ? errno : 0; }), EBADF);
    // And what both refuse, with flatpak's errno.
    EXPECT_EQ(UnderFilter(*filter, [] { return ::chroot(s_bad) < 0 ? errno : 0; }), EPERM);
    EXPECT_EQ(UnderFilter(*filter,
                          [] {
                            unsigned long req =
                                (0x123UL << 32) | static_cast<unsigned long>(TIOCSTI);
                            return ::syscall(SYS_ioctl, -1, req, s_bad) < 0 ? errno : 0;
                          }),
              EPERM);  // CVE-2019-10063
    EXPECT_EQ(UnderFilter(*filter, [] { return ::ioctl(-1, TIOCLINUX, s_bad) < 0 ? errno : 0; }),
              EPERM);
  }
}

TEST(SeccompTest, StrictAlsoRefusesRawSocketsAndUnusualFamilies) {
  auto filter = SeccompFilter::Build({.strict = true});
  ASSERT_TRUE(filter) << filter.error().message();
  EXPECT_EQ(UnderFilter(*filter, [] { return ::socket(AF_PACKET, SOCK_DGRAM, 0) < 0 ? errno : 0; }),
            EAFNOSUPPORT);
  EXPECT_EQ(
      UnderFilter(*filter,
                  [] { return ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, 1) < 0 ? errno : 0; }),
      EPERM);
  // Netlink is refused whole, raw or not, with the errno getifaddrs' callers
  // survive (seccomp.cc).
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          return ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE) < 0
                                     ? errno
                                     : 0;
                        }),
            EOPNOTSUPP);
  EXPECT_EQ(UnderFilter(*filter,
                        [] {
                          int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
                          if (fd < 0) return errno;
                          ::close(fd);
                          fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
                          return fd < 0 ? errno : 0;
                        }),
            0);
}

TEST(SeccompTest, ExtraNamesFromThePolicyAreRefusedAndUnknownOnesAreErrors) {
  auto filter = SeccompFilter::Build({.extra_deny = {"getpid"}});
  ASSERT_TRUE(filter) << filter.error().message();
  EXPECT_EQ(UnderFilter(*filter, [] { return ::syscall(SYS_getpid) < 0 ? errno : 0; }), EPERM);
  EXPECT_TRUE(KnownSyscall("chmod"));
  EXPECT_FALSE(KnownSyscall("teleport"));
  EXPECT_FALSE(SeccompFilter::Build({.extra_deny = {"teleport"}}));
  EXPECT_TRUE(SeccompAvailable());
}

// Programs are compiled once per set of options and kept (a daemon builds
// the same filter for every sandbox): a later build must still be the
// program of its own options, never another's.
TEST(SeccompTest, ABuildIsTheProgramOfItsOwnOptionsWhenBuiltAgain) {
  auto code = [](const SeccompFilter& f) {
    const sock_fprog* p = f.program();
    return std::string(reinterpret_cast<const char*>(p->filter), p->len * sizeof(sock_filter));
  };
  const std::vector<SeccompOptions> options = {
      {}, {.strict = true}, {.unix_sockets_only = true}, {.extra_deny = {"getpid"}}};
  std::vector<std::string> first;
  for (const auto& o : options) {
    auto f = SeccompFilter::Build(o);
    ASSERT_TRUE(f) << f.error().message();
    first.push_back(code(*f));
  }
  for (size_t i = 0; i < options.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(first[i], first[j]) << i << " and " << j;
  }
  for (int round = 0; round < 2; ++round) {
    for (size_t i = options.size(); i-- > 0;) {
      auto again = SeccompFilter::Build(options[i]);
      ASSERT_TRUE(again) << again.error().message();
      EXPECT_EQ(code(*again), first[i]) << i;
    }
  }
  auto denied = SeccompFilter::Build({.extra_deny = {"getpid"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(UnderFilter(*denied, [] { return ::syscall(SYS_getpid) < 0 ? errno : 0; }), EPERM);
  auto plain = SeccompFilter::Build({});
  ASSERT_TRUE(plain);
  EXPECT_EQ(UnderFilter(*plain, [] { return ::syscall(SYS_getpid) < 0 ? errno : 0; }), 0);
}

// The filters compiled as cordon was built (every level, with and without
// a network namespace) are what the libseccomp linked here compiles for
// those options now, and what a build of them gives: the tests above,
// which build them, try the very programs sandboxes get.
TEST(SeccompTest, TheProgramsCompiledAtBuildTimeAreWhatLibseccompCompilesNow) {
  auto bytes = [](const sock_filter* code, size_t size) {
    return std::string(reinterpret_cast<const char*>(code), size * sizeof(sock_filter));
  };
  const PrecompiledSeccompSet& set = kPrecompiledSeccomp;
  const scmp_version* linked = seccomp_version();
  ASSERT_EQ(std::tie(set.major, set.minor, set.micro),
            std::tie(linked->major, linked->minor, linked->micro));
  ASSERT_EQ(set.count, 4u);
  std::set<std::pair<bool, bool>> seen;
  for (size_t i = 0; i < set.count; ++i) {
    const PrecompiledSeccomp& p = set.programs[i];
    SCOPED_TRACE(testing::Message()
                 << "strict " << p.strict << ", unix_sockets_only " << p.unix_sockets_only);
    seen.emplace(p.strict, p.unix_sockets_only);
    const SeccompOptions options{.strict = p.strict, .unix_sockets_only = p.unix_sockets_only};
    auto compiled = CompileSeccomp(options);
    ASSERT_TRUE(compiled) << compiled.error().message();
    EXPECT_EQ(bytes(p.code, p.size), bytes(compiled->data(), compiled->size()));
    auto built = SeccompFilter::Build(options);
    ASSERT_TRUE(built) << built.error().message();
    EXPECT_EQ(built->program()->len, p.size);
    EXPECT_EQ(bytes(built->program()->filter, built->program()->len), bytes(p.code, p.size));
  }
  EXPECT_EQ(seen.size(), 4u);
}

}  // namespace
}  // namespace cordon::contain
