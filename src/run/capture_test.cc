#include "run/capture.h"

#include <gtest/gtest.h>

#include "run/result.h"
#include "sys/json_text.h"

namespace cordon::run {
namespace {

TEST(CaptureTest, KeepsUpToTheLimitAndCountsEverything) {
  Capture c(16);
  EXPECT_EQ(c.Append(std::string(10, 'a')), std::string(10, 'a'));
  EXPECT_EQ(c.Append(std::string(490, 'b')), std::string(6, 'b'));
  EXPECT_EQ(c.Append("more"), "");
  c.Finish();
  EXPECT_EQ(c.data().size(), 16u);
  EXPECT_TRUE(c.truncated());
  EXPECT_EQ(c.total_bytes(), 504u);
}

TEST(CaptureTest, ExactlyAtTheLimitIsNotTruncated) {
  Capture c(4);
  c.Append("abcd");
  c.Finish();
  EXPECT_FALSE(c.truncated());
  EXPECT_EQ(c.data(), "abcd");
}

TEST(CaptureTest, TheCutNeverSplitsACharacter) {
  // "é" is 2 bytes, "€" 3, "😀" 4: a 4-byte cap after "a" cannot take all of "😀".
  Capture c(4);
  c.Append(
      "a\xF0\x9F\x98\x80"
      "b");
  c.Finish();
  EXPECT_TRUE(c.truncated());
  EXPECT_EQ(c.data(), "a");
  Capture d(4);
  d.Append("\xC3\xA9\xE2\x82\xAC");  // é€ is 5 bytes
  d.Finish();
  EXPECT_EQ(d.data(), "\xC3\xA9");
}

TEST(CaptureTest, ACharacterSplitAcrossChunksIsHeldBackNotCut) {
  Capture c(100);
  EXPECT_EQ(c.Append("x\xE2\x82"), "x");  // the first two bytes of "€"
  EXPECT_EQ(c.Append("\xAC"
                     "y"),
            "\xE2\x82\xAC"
            "y");
  c.Finish();
  EXPECT_EQ(c.data(),
            "x\xE2\x82\xAC"
            "y");
  EXPECT_FALSE(c.truncated());
}

TEST(CaptureTest, AnUnfinishedCharacterAtTheEndIsStillKept) {
  Capture c(100);
  c.Append("ok\xE2\x82");
  EXPECT_EQ(c.Finish(), "\xE2\x82");
  EXPECT_EQ(c.data(), "ok\xE2\x82");
}

TEST(CaptureTest, InvalidUtf8NeverProducesInvalidJson) {
  RunResult r;
  r.out.data = "bad \xFF\xFE bytes \xC3";
  std::string text = sys::JsonText(ToJson(r));
  auto parsed = nlohmann::json::parse(text);  // throws if invalid
  EXPECT_EQ(parsed["stdout"], "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes \xEF\xBF\xBD");
}

TEST(CaptureTest, ItsBufferNeverGrowsPastTheCap) {
  // What a flooding child costs the daemon: the cap, not the next power of
  // two above it (a 10 MiB cap would otherwise reach 16 MiB).
  const size_t cap = 10 << 20;
  Capture c(cap);
  std::string chunk(64 * 1024, 'y');
  for (int i = 0; i < 200; ++i) c.Append(chunk);
  EXPECT_TRUE(c.truncated());
  EXPECT_EQ(c.data().size(), cap);
  EXPECT_LE(c.data().capacity(), cap);
  EXPECT_EQ(c.total_bytes(), 200u * chunk.size());
  std::string taken = c.Take();
  EXPECT_EQ(taken.size(), cap);
}

TEST(CaptureTest, AResultsJsonLineIsItsJsonTextAndANewline) {
  RunResult r;
  r.out.data = std::string(100000, 'y') + "\n\xFF\x01 \"q\"";
  r.err.data = "bad \xC3";
  nlohmann::json value = ToJson(r);
  for (size_t output_bytes : {size_t{0}, size_t{16}, size_t{1} << 20}) {
    EXPECT_EQ(sys::JsonLine(value, output_bytes), sys::JsonText(value) + "\n");
  }
}

TEST(BoundaryTest, Helpers) {
  EXPECT_EQ(CompletePrefix("abc"), 3u);
  EXPECT_EQ(CompletePrefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(CompletePrefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(CompletePrefix("\xFF\xFF"), 2u);  // not UTF-8: nothing to wait for
  EXPECT_EQ(CutAtBoundary("a\xE2\x82\xAC", 2), 1u);
  EXPECT_EQ(CutAtBoundary("a\xE2\x82\xAC", 4), 4u);
  EXPECT_EQ(CutAtBoundary("abc", 2), 2u);
}

}  // namespace
}  // namespace cordon::run
