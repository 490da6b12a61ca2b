#include "proc/signal_identity.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/stat.h"
#include "sys/pidfd.h"

namespace cordon::proc {
namespace {

int OpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n;
}

pid_t Sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

int WaitSignal(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
}

TEST(SignalIdentityTest, SignalsTheSameProcess) {
  pid_t pid = Sleeper();
  Identity id = ReadIdentity(pid).value();
  int fds = OpenFds();
  EXPECT_EQ(SignalIdentity(id, SIGTERM, /*check_parent=*/true).value(), Mismatch::kNone);
  EXPECT_EQ(OpenFds(), fds);  // the pidfd was closed
  EXPECT_EQ(WaitSignal(pid), SIGTERM);
}

TEST(SignalIdentityTest, NeverSignalsARecycledPid) {
  pid_t pid = Sleeper();
  Identity old = ReadIdentity(pid).value();
  old.start_ticks -= 1;  // the identity of an earlier process with this pid
  int fds = OpenFds();
  EXPECT_EQ(SignalIdentity(old, SIGKILL).value(), Mismatch::kPidReused);
  EXPECT_EQ(OpenFds(), fds);
  // Still alive: probe without signalling.
  EXPECT_EQ(::kill(pid, 0), 0);
  auto st = ReadStat(pid);
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->exited());
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(SignalIdentityTest, AGoneProcessIsNotSignalledAndNothingLeaks) {
  pid_t pid = Sleeper();
  Identity id = ReadIdentity(pid).value();
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  int fds = OpenFds();
  EXPECT_EQ(SignalIdentity(id, SIGTERM).value(), Mismatch::kGone);
  EXPECT_EQ(OpenFds(), fds);
}

TEST(SignalIdentityTest, OtherBootAndOtherParent) {
  pid_t pid = Sleeper();
  Identity id = ReadIdentity(pid).value();
  Identity other_boot = id;
  other_boot.boot_id = "11111111-1111-1111-1111-111111111111";
  EXPECT_EQ(SignalIdentity(other_boot, SIGKILL).value(), Mismatch::kWrongBoot);
  Identity other_parent = id;
  other_parent.ppid = 1;
  EXPECT_EQ(SignalIdentity(other_parent, SIGKILL, true).value(), Mismatch::kParentChanged);
  EXPECT_EQ(::kill(pid, 0), 0);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(SignalIdentityTest, ARetiredPidFdReportsDead) {
  pid_t pid = Sleeper();
  auto fd = sys::PidFd::Open(pid);
  ASSERT_TRUE(fd);
  EXPECT_TRUE(PidFdAlive(fd->fd()));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(PidFdAlive(fd->fd()));
  EXPECT_FALSE(fd->SendSignal(SIGTERM));  // ESRCH: a retired pidfd signals nothing
}

TEST(IdentityJsonTest, RoundTripsAndRejectsBadShapes) {
  Identity id{42, 1, 12345, "abc"};
  EXPECT_EQ(IdentityFromJson(ToJson(id)).value(), id);
  EXPECT_EQ(
      IdentityFromJsonText(R"({"pid":42,"ppid":1,"start_ticks":12345,"boot_id":"abc"})").value(),
      id);
  for (const char* bad : {"[]", "{}", R"({"pid":true,"ppid":1,"start_ticks":1,"boot_id":"a"})",
                          R"({"pid":1.5,"ppid":1,"start_ticks":1,"boot_id":"a"})",
                          R"({"pid":0,"ppid":1,"start_ticks":1,"boot_id":"a"})",
                          R"({"pid":1,"ppid":1,"start_ticks":1,"boot_id":""})",
                          R"({"pid":1,"ppid":1,"start_ticks":1,"boot_id":"a","x":1})",
                          R"({"pid":1,"ppid":1,"boot_id":"a"})", "not json"}) {
    EXPECT_FALSE(IdentityFromJsonText(bad)) << bad;
  }
  EXPECT_NE(IdentityFromJsonText(R"({"pid":1,"ppid":1,"start_ticks":1,"boot_id":"a","x":1})")
                .error()
                .find("\"x\""),
            std::string::npos);
}

}  // namespace
}  // namespace cordon::proc
