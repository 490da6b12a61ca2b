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
  // As forms (python-requests' params=) encode them: '+' is a space.
  EXPECT_EQ(ParseQuery("dir=my+dir")["dir"], "my dir");
  EXPECT_EQ(ParseQuery("dir=a%2Bb")["dir"], "a+b");
  // A path's '+' is itself.
  EXPECT_EQ(PercentDecode("a+b"), "a+b");
  EXPECT_EQ(Segments("/v1/sessions/x/files/a%2F..%2Fb"),
            (std::vector<std::string>{"v1", "sessions", "x", "files", "a%2F..%2Fb"}));
  EXPECT_EQ(Segments("/v1/sessions/x/files//etc"),
            (std::vector<std::string>{"v1", "sessions", "x", "files", "", "etc"}));
}

TEST(UrlTest, QueryKeysAndFlags) {
  auto q = ParseQuery("dir=a&offset=1");
  EXPECT_EQ(UnknownQueryKey(q, {"dir", "offset"}), std::nullopt);
  EXPECT_EQ(UnknownQueryKey(q, {"dir"}), "offset");
  EXPECT_EQ(UnknownQueryKey(ParseQuery(""), {}), std::nullopt);
  EXPECT_EQ(RepeatedQueryKey("dir=a&offset=1"), std::nullopt);
  EXPECT_EQ(RepeatedQueryKey(""), std::nullopt);
  EXPECT_EQ(RepeatedQueryKey("state=ready&kind=shell&state=closed"), "state");
  EXPECT_EQ(RepeatedQueryKey("keep_workspace&keep_workspace=false"), "keep_workspace");
  EXPECT_EQ(RepeatedQueryKey("dir=a&d%69r=b"), "dir");  // decoded first
  EXPECT_EQ(ParseQueryFlag(""), true);
  EXPECT_EQ(ParseQueryFlag("yes"), true);
  EXPECT_EQ(ParseQueryFlag("0"), false);
  EXPECT_EQ(ParseQueryFlag("True"), std::nullopt);
  EXPECT_EQ(ParseQueryFlag("on"), std::nullopt);
}

TEST(UrlTest, SegmentsMatchAPatternWithWildcards) {
  std::vector<std::string> seg = Segments("/api/kernels/k-1/channels");
  EXPECT_TRUE(SegmentsMatch(seg, {"api", "kernels", "*", "channels"}));
  EXPECT_FALSE(SegmentsMatch(seg, {"api", "kernels", "*"}));
  EXPECT_FALSE(SegmentsMatch(seg, {"api", "kernels", "*", "restart"}));
  EXPECT_FALSE(SegmentsMatch(seg, {"api", "kernels", "*", "channels", "*"}));
  EXPECT_TRUE(SegmentsMatch(Segments("/api"), {"api"}));
}

}  // namespace
}  // namespace cordon::api
