#include "contain/landlock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "support.h"

namespace cordon::contain {
namespace {

TEST(LandlockTest, OnlyTheDeclaredPathsAreReachableAndOnlyAsDeclared) {
  if (LandlockAbi() == 0) GTEST_SKIP() << "this kernel has no Landlock";
  testing::TempDir read_only, writable, elsewhere;
  std::ofstream(read_only / "r") << "readable";
  std::ofstream(elsewhere / "secret") << "secret";
  LandlockPolicy policy(LandlockAbi(), /*refuse_tcp=*/false);
  policy.Allow(read_only.path(), LandlockAccess::kReadExec);
  policy.Allow(writable.path(), LandlockAccess::kReadWrite);
  policy.Allow("/nonexistent/is/skipped", LandlockAccess::kReadWrite);
  const LandlockPlan* plan = policy.plan();

  pid_t pid = ::fork();
  if (pid == 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ApplyLandlock(plan) != 0) ::_exit(100);
    auto opens = [](const std::string& path, int flags) {
      int fd = ::open(path.c_str(), flags | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
      return fd >= 0;
    };
    int failures = 0;
    failures += !opens(read_only / "r", O_RDONLY);
    failures += opens(read_only / "new", O_WRONLY);     // read-only: no creation
    failures += !opens(writable / "new", O_WRONLY);     // writable
    failures += opens(elsewhere / "secret", O_RDONLY);  // undeclared: not even read
    failures += errno != EACCES;
    ::_exit(failures);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(std::filesystem::exists(writable / "new"));
  EXPECT_FALSE(std::filesystem::exists(read_only / "new"));
}

}  // namespace
}  // namespace cordon::contain
