#include "session/workspace.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support.h"

namespace cordon::session {
namespace {

TEST(WorkspaceTest, IdsAreSafePathComponents) {
  EXPECT_TRUE(ValidSessionId("a-B_9"));
  EXPECT_TRUE(ValidSessionId(std::string(64, 'x')));
  for (std::string bad : {std::string(), std::string(".."), std::string("a/b"), std::string("a b"),
                          std::string("é"), std::string(65, 'x')}) {
    EXPECT_FALSE(ValidSessionId(bad)) << bad;
  }
}

TEST(WorkspaceTest, PrivateAndSweptOnlyWhenAsked) {
  testing::TempDir state;
  ASSERT_TRUE(PrepareWorkspace(state.path(), "w", false));
  struct stat st {};
  ASSERT_EQ(::stat(WorkspacePath(state.path(), "w").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((state / "workspaces").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::string file = WorkspacePath(state.path(), "w") + "/kept";
  ::close(::creat(file.c_str(), 0600));
  ASSERT_TRUE(PrepareWorkspace(state.path(), "w", false));  // reuse
  EXPECT_EQ(::access(file.c_str(), F_OK), 0);
  ASSERT_TRUE(PrepareWorkspace(state.path(), "w", true));  // sweep
  EXPECT_NE(::access(file.c_str(), F_OK), 0);
  ASSERT_TRUE(RemoveWorkspace(state.path(), "w"));
  EXPECT_NE(::access(WorkspacePath(state.path(), "w").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace cordon::session
