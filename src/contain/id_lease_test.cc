#include "contain/id_lease.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "support.h"

namespace cordon::contain {
namespace {

TEST(IdLeaseTest, TwoSandboxesNeverShareAnIdAndAFullRangeSaysSo) {
  testing::TempDir dir;
  IdRange range{2000000, 2};
  auto a = IdLease::Acquire(dir.path(), range);
  auto b = IdLease::Acquire(dir.path(), range);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->id(), b->id());
  for (uint32_t id : {a->id(), b->id()}) {
    EXPECT_GE(id, range.first);
    EXPECT_LT(id, range.first + range.count);
  }
  auto c = IdLease::Acquire(dir.path(), range);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().errno_value(), EAGAIN);
  uint32_t freed = a->id();
  a = sys::Result<IdLease>(std::unexpected(sys::Error("dropped")));  // closes the lock
  auto d = IdLease::Acquire(dir.path(), range);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->id(), freed);
}

TEST(IdLeaseTest, AnIdStaysTakenWhileAnyHolderLivesEvenIfTheSupervisorIsGone) {
  testing::TempDir dir;
  IdRange range{3000000, 1};
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t holder;
  {
    auto lease = IdLease::Acquire(dir.path(), range);
    ASSERT_TRUE(lease);
    holder = ::fork();  // as the sandbox's init inherits the lock
    if (holder == 0) {
      char c;
      ::close(go[1]);
      (void)!::read(go[0], &c, 1);
      ::_exit(0);
    }
  }  // the "supervisor" let go of it
  ::close(go[0]);
  EXPECT_FALSE(IdLease::Acquire(dir.path(), range));
  ::close(go[1]);  // the holder exits: the kernel drops the lock
  ::waitpid(holder, nullptr, 0);
  EXPECT_TRUE(IdLease::Acquire(dir.path(), range));
}

}  // namespace
}  // namespace cordon::contain
