#include "contain/id_lease.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

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

// Root leases in /run/cordon/ids, and falls back to the state directory
// where that cannot be made: /run read-only, with or without /run/cordon in
// it (an image that ships the directory under a read-only root). Observed
// in a mount namespace of the test's own, over a tmpfs /run of its own.
TEST(IdLeaseDirTest, RootLeasesInRunOrWhereRunIsReadOnlyInTheStateDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "a /run of the test's own needs root (a mount namespace)";
  testing::TempDir state;
  std::string got = testing::OutputOfChild([&] {
    auto remount = [](unsigned long flags) {
      return ::mount(nullptr, "/run", nullptr, MS_REMOUNT | flags, "size=64k") == 0;
    };
    auto lease_in = [&] {
      std::string dir = IdLeaseDir(state.path());
      auto lease = IdLease::Acquire(dir, IdRange{4000000, 1});
      return dir + (lease ? " leased" : " refused: " + lease.error().message());
    };
    std::string out;
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/run", "tmpfs", 0, "size=64k") != 0) {
      out = "setup failed";
    } else {
      out = lease_in();  // writable: made there
      struct stat st {};
      if (::stat("/run/cordon", &st) == 0 && (st.st_mode & 07777) == 0711) out += ", 0711";
      std::error_code ec;
      if (std::filesystem::remove_all(kHostIdLeaseDir, ec) < 2 || !remount(MS_RDONLY)) {
        out += "\nsetup failed";
      } else {
        out += "\n" + lease_in();  // /run/cordon there, read-only
        if (!remount(0) || ::rmdir("/run/cordon") != 0 || !remount(MS_RDONLY)) {
          out += "\nsetup failed";
        } else {
          out += "\n" + lease_in();  // no /run/cordon, read-only
        }
      }
    }
    return out;
  });
  const std::string fallback = state.path() + "/ids leased";
  EXPECT_EQ(got, std::string(kHostIdLeaseDir) + " leased, 0711\n" + fallback + "\n" + fallback);
}

}  // namespace
}  // namespace cordon::contain
