#include "contain/seccomp.h"

#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

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
                          int fd = ::socket(AF_PACKET, SOCK_RAW, 0);
                          return fd >= 0 || errno != EAFNOSUPPORT ? 0 : 1;
                        }),
            0);
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

}  // namespace
}  // namespace cordon::contain
