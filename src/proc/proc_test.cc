#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/identity.h"
#include "proc/stat.h"

namespace cordon::proc {
namespace {

TEST(StatTest, CommandNameEndsAtTheLastParenthesis) {
  // A name may contain spaces, ") " and digits: only the last ')' ends it.
  auto st = ParseStat(
      "1234 (evil) 9 9 (x) S) R 17 1234 1234 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 "
      "987654 1000 100 18446744073709551615\n");
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->pid, 1234);
  EXPECT_EQ(st->comm, "evil) 9 9 (x) S");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->ppid, 17);
  EXPECT_EQ(st->pgrp, 1234);
  EXPECT_EQ(st->session, 1234);
  EXPECT_EQ(st->start_ticks, 987654u);
}

TEST(StatTest, RejectsMalformedText) {
  EXPECT_FALSE(ParseStat(""));
  EXPECT_FALSE(ParseStat("12 no parens S 1"));
  EXPECT_FALSE(ParseStat("x (a) S 1 2 3"));
  EXPECT_FALSE(ParseStat("12 (a) S 1 2"));
}

TEST(StatTest, ReadsARealProcessWithAStrangeName) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "a) b (c");
    ::pause();
    ::_exit(0);
  }
  // The rename happens in the child; look until it shows.
  std::optional<Stat> st;
  for (int i = 0; i < 1000; ++i) {
    auto read = ReadStat(pid);
    ASSERT_TRUE(read);
    if (read->comm == "a) b (c") {
      st = *read;
      break;
    }
    ::usleep(1000);
  }
  ASSERT_TRUE(st);
  EXPECT_EQ(st->ppid, ::getpid());
  EXPECT_EQ(st->pgrp, ::getpgrp());
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(IdentityTest, VerifyTellsWhyAProcessIsNotTheSame) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  auto id = ReadIdentity(pid);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pid, pid);
  EXPECT_EQ(id->ppid, ::getpid());
  EXPECT_EQ(id->boot_id.size(), 36u);
  EXPECT_EQ(Verify(*id), Mismatch::kNone);
  EXPECT_EQ(Verify(*id, /*check_parent=*/true), Mismatch::kNone);

  Identity reused = *id;
  reused.start_ticks += 1;  // what a recycled pid looks like
  EXPECT_EQ(Verify(reused), Mismatch::kPidReused);
  Identity other_boot = *id;
  other_boot.boot_id = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(Verify(other_boot), Mismatch::kWrongBoot);
  Identity moved = *id;
  moved.ppid = 1;
  EXPECT_EQ(Verify(moved, true), Mismatch::kParentChanged);
  EXPECT_EQ(Verify(moved, false), Mismatch::kNone);

  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(Verify(*id), Mismatch::kGone);
  EXPECT_EQ(MismatchName(Mismatch::kPidReused), "pid_reused");
}

}  // namespace
}  // namespace cordon::proc
