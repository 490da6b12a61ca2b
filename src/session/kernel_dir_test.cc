#include "session/kernel_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "support.h"

namespace cordon::session {
namespace {

TEST(KernelDirTest, MakesTheRootAndItsMissingParentsTraversableOnly) {
  testing::TempDir dir;
  const std::string root = dir / "run/cordon/k-1";
  ASSERT_TRUE(PrepareRuntimeRoot(root));
  struct stat st {};
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_TRUE(std::filesystem::is_empty(root));  // the trial directory is gone
  ASSERT_TRUE(PrepareRuntimeRoot(root));         // again: it is there
}

TEST(KernelDirTest, WhereTheRootCannotBeMadeTheErrorNamesItTheCallAndTheFix) {
  testing::TempDir dir;
  // A file where a parent directory should be: as /run missing, or
  // read-only, this fails for root too.
  std::FILE* f = std::fopen((dir / "run").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const std::string root = dir / "run/cordon/k-1";
  auto ready = PrepareRuntimeRoot(root);
  ASSERT_FALSE(ready);
  const std::string& m = ready.error().what();
  EXPECT_NE(m.find("python sessions cannot start"), std::string::npos) << m;
  EXPECT_NE(m.find(root), std::string::npos) << m;
  EXPECT_NE(m.find("mkdir(\"" + dir / "run/cordon" + "\"): ENOTDIR"), std::string::npos) << m;
  EXPECT_NE(m.find("state directory"), std::string::npos) << m;  // the fix for a non-/run root
  EXPECT_EQ(ready.error().errno_value(), ENOTDIR);
}

TEST(KernelDirTest, TheFixForRunCordonNamesTheVolumeToMountThere) {
  const std::string fix = RuntimeRootFix("/run/cordon/k-0123456789abcdef");
  EXPECT_NE(fix.find("/run/cordon"), std::string::npos) << fix;
  EXPECT_NE(fix.find("--tmpfs /run/cordon"), std::string::npos) << fix;
  EXPECT_NE(fix.find("emptyDir"), std::string::npos) << fix;
}

}  // namespace
}  // namespace cordon::session
