#include "api/url.h"

#include <gtest/gtest.h>

namespace cordon::api {
namespace {

TEST(UrlTest, DecodesPathsAndQueries) {
  EXPECT_EQ(PercentDecode("a%2Fb%20c%zz%4"), "a/b c%zz%4");
  auto q = ParseQuery("dir=a%2Fb&keep_workspace=true&flag");
  EXPECT_EQ(q["dir"], "a/b");
  EXPECT_EQ(q["keep_workspace"], "true");
  EXPECT_TRUE(q.contains("flag"));
  EXPECT_EQ(Segments("/v1/sessions/x/files/a%2F..%2Fb"),
            (std::vector<std::string>{"v1", "sessions", "x", "files", "a%2F..%2Fb"}));
  EXPECT_EQ(Segments("/v1/sessions/x/files//etc"),
            (std::vector<std::string>{"v1", "sessions", "x", "files", "", "etc"}));
}

}  // namespace
}  // namespace cordon::api
