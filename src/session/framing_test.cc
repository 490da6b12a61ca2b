#include "session/framing.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "support.h"

namespace cordon::session {
namespace {

// What bash makes of a quoted string: the test runs the real shell on a
// script file holding `printf %s <quoted>`.
std::string ThroughBash(const std::string& bytes) {
  testing::TempDir dir;
  std::string script = dir / "script.sh";
  FILE* f = std::fopen(script.c_str(), "w");
  std::string text = "printf %s " + AnsiCQuote(bytes);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  FILE* p = ::popen(("/bin/bash " + script).c_str(), "r");
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(AnsiCQuoteTest, EveryByteButNulSurvivesBash) {
  std::string all;
  for (int c = 1; c < 256; ++c) all.push_back(static_cast<char>(c));
  std::string quoted = AnsiCQuote(all);
  EXPECT_EQ(quoted.find('\n'), std::string::npos);
  EXPECT_EQ(quoted.find('\'', 2), quoted.size() - 1) << "only the closing quote";
  EXPECT_EQ(ThroughBash(all), all);
  // A hex digit right after an escape does not join it.
  EXPECT_EQ(ThroughBash("\n1a\tf"), "\n1a\tf");
  EXPECT_EQ(ThroughBash("'; rm -rf x; echo '"), "'; rm -rf x; echo '");
}

TEST(NonceTest, FreshAndWellFormed) {
  std::string a = NewNonce(), b = NewNonce();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), std::string("cordon-end-").size() + 32);
  EXPECT_TRUE(a.starts_with("cordon-end-"));
}

struct Collected {
  std::string out;
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view b) { out.append(b); };
  }
};

TEST(FrameReaderTest, SplitsAtTheMarkerEvenAcrossChunks) {
  FrameReader r;
  Collected c;
  r.Expect("cordon-end-abc", true);
  std::string stream =
      "hello cordon-end-ab\nno marker yet"
      "cordon-end-abc 42\ntrailing";
  // Feed one byte at a time: the marker is split everywhere possible.
  bool done = false;
  for (char ch : stream) done = r.Feed(std::string_view(&ch, 1), c.sink()) || done;
  EXPECT_TRUE(done);
  EXPECT_EQ(c.out, "hello cordon-end-ab\nno marker yet");
  EXPECT_EQ(r.status(), 42);
}

TEST(FrameReaderTest, PassesOutputOnAtOnceHoldingBackOnlyAPossibleMarkerStart) {
  FrameReader r;
  Collected c;
  r.Expect("cordon-end-abc", true);
  EXPECT_FALSE(r.Feed("tick 1\n", c.sink()));
  EXPECT_EQ(c.out, "tick 1\n");
  EXPECT_FALSE(r.Feed("tick 2 cord", c.sink()));
  EXPECT_EQ(c.out, "tick 1\ntick 2 ");
  EXPECT_FALSE(r.Feed("ial\n", c.sink()));
  EXPECT_EQ(c.out, "tick 1\ntick 2 cordial\n");
  EXPECT_TRUE(r.Feed("cordon-end-abc 0\n", c.sink()));
  EXPECT_EQ(c.out, "tick 1\ntick 2 cordial\n");
}

TEST(FrameReaderTest, OutputWithoutATrailingNewlineAndStderrMarkers) {
  FrameReader r;
  Collected c;
  r.Expect("cordon-end-x", false);
  EXPECT_TRUE(r.Feed("abccordon-end-x\n", c.sink()));
  EXPECT_EQ(c.out, "abc");
  EXPECT_FALSE(r.status());
}

TEST(FrameReaderTest, AnOldMarkerIsOnlyOutput) {
  FrameReader r;
  Collected c;
  r.Expect("cordon-end-new", true);
  EXPECT_FALSE(r.Feed("cordon-end-old 0\n", c.sink()));
  EXPECT_TRUE(r.Feed("cordon-end-new 1\n", c.sink()));
  EXPECT_EQ(c.out, "cordon-end-old 0\n");
}

TEST(FrameReaderTest, NothingExpectedDropsBytesAndFlushGivesTheTail) {
  FrameReader r;
  Collected c;
  EXPECT_FALSE(r.Feed("startup noise", c.sink()));
  EXPECT_EQ(c.out, "");
  r.Expect("cordon-end-zzz", true);
  r.Feed("partial cordon-end-z", c.sink());
  r.Flush(c.sink());
  EXPECT_EQ(c.out, "partial cordon-end-z");
}

}  // namespace
}  // namespace cordon::session
