#include "cli/units.h"

#include <gtest/gtest.h>

namespace cordon::cli {
namespace {

TEST(UnitsTest, Durations) {
  EXPECT_EQ(ParseDurationMs("2").value(), 2000);
  EXPECT_EQ(ParseDurationMs("0.5").value(), 500);
  EXPECT_EQ(ParseDurationMs(".25").value(), 250);
  EXPECT_EQ(ParseDurationMs("1.5s").value(), 1500);
  EXPECT_EQ(ParseDurationMs("250ms").value(), 250);
  EXPECT_EQ(ParseDurationMs("2m").value(), 120000);
  EXPECT_EQ(ParseDurationMs("12h").value(), 12 * 3600 * 1000);
  EXPECT_EQ(ParseDurationMs("1.5H").value(), 5400 * 1000);
  EXPECT_EQ(ParseDurationMs("7d").value(), int64_t{7} * 86400 * 1000);
  EXPECT_EQ(ParseDurationMs("0.5d").value(), 12 * 3600 * 1000);
  EXPECT_EQ(ParseDurationMs("0").value(), 0);
  EXPECT_EQ(ParseDurationMs("0.0001").value(), 0);
  for (const char* bad : {"", "abc", "-1", "1.", "1..2", "1x", "ms", "1.5ms.", " 1"}) {
    EXPECT_FALSE(ParseDurationMs(bad)) << bad;
  }
  EXPECT_NE(ParseDurationMs("-1").error().find("negative"), std::string::npos);
  EXPECT_FALSE(ParseDurationMs("99999999999999999999"));
  EXPECT_TRUE(ParseDurationMs("106751991167d"));  // INT64_MAX milliseconds, in whole days
  EXPECT_FALSE(ParseDurationMs("106751991168d"));
  for (const char* bad : {"1dd", "d", "1hm", "1w"}) EXPECT_FALSE(ParseDurationMs(bad)) << bad;
  // 1M is a size: as a duration it was a minute, silently.
  EXPECT_NE(ParseDurationMs("1M").error().find("write m for minutes"), std::string::npos);
  EXPECT_EQ(ParseDurationMs("250MS").value(), 250);
  // A timer is at most a year.
  EXPECT_EQ(ParseTimerMs("365d").value(), int64_t{365} * 86400 * 1000);
  EXPECT_NE(ParseTimerMs("366d").error().find("at most a year"), std::string::npos);
  EXPECT_FALSE(ParseTimerMs("106751991167d"));
  EXPECT_FALSE(ParseTimerMs("-1"));
}

TEST(UnitsTest, SizesAreBinary) {
  EXPECT_EQ(ParseSize("4096").value(), 4096);
  EXPECT_EQ(ParseSize("16K").value(), 16 * 1024);
  EXPECT_EQ(ParseSize("16k").value(), 16 * 1024);
  EXPECT_EQ(ParseSize("256M").value(), 256 << 20);
  EXPECT_EQ(ParseSize("256MiB").value(), 256 << 20);
  EXPECT_EQ(ParseSize("1G").value(), int64_t{1} << 30);
  EXPECT_EQ(ParseSize("100B").value(), 100);
  for (const char* bad : {"", "-1", "1.5G", "G", "12X", "1KK", "1 K"}) {
    EXPECT_FALSE(ParseSize(bad)) << bad;
  }
  EXPECT_FALSE(ParseSize("9999999999T"));
}

TEST(UnitsTest, Counts) {
  EXPECT_EQ(ParseCount("64").value(), 64);
  EXPECT_EQ(ParseCount("0").value(), 0);
  for (const char* bad : {"", "-3", "1.5", "ten", "5K"}) EXPECT_FALSE(ParseCount(bad)) << bad;
}

TEST(UnitsTest, Cpus) {
  EXPECT_EQ(ParseCpus("2").value(), 2.0);
  EXPECT_EQ(ParseCpus("0.5").value(), 0.5);
  EXPECT_EQ(ParseCpus(".25").value(), 0.25);
  EXPECT_EQ(ParseCpus("0.01").value(), 0.01);
  for (const char* bad :
       {"", "0", "0.0", "0.009", "0.0001", "-1", "1e3", "inf", "nan", "1.2.3", ".", "5000", "2 "}) {
    EXPECT_FALSE(ParseCpus(bad)) << bad;
  }
}

}  // namespace
}  // namespace cordon::cli
