#include "contain/policy.h"

#include <gtest/gtest.h>

namespace cordon::contain {
namespace {

TEST(PolicyTest, EverySettingOfTheSchema) {
  Spec spec;
  auto bad = ApplyPolicy(R"(
isolation = "strict"
network = "host"
ro_binds = [{src = "/opt/data", dst = "/data"}, {src = "/srv/ro"}]
binds = [{src = "/srv/out"}]
tmp_size_bytes = 1048576
uid_range = {first = 500000000, count = 1000}
system_dirs = ["/usr", "/etc"]
hidden_paths = ["/etc/shadow"]
seccomp = {deny = ["chmod", "fchmod"]}
timeout_ms = 5000
grace_ms = 100
output_limit_bytes = 4096
memory_bytes = 67108864
pids = 32
cpu_seconds = 3
file_size_bytes = 1024
open_files = 64
address_space_bytes = 1073741824
)",
                         spec);
  ASSERT_FALSE(bad) << bad->message();
  const IsolationSpec& i = spec.isolation;
  EXPECT_EQ(i.level, Isolation::kStrict);
  EXPECT_EQ(i.network, Network::kHost);
  EXPECT_EQ(i.binds, (std::vector<Bind>{{"/srv/out", "/srv/out", true},
                                        {"/opt/data", "/data", false},
                                        {"/srv/ro", "/srv/ro", false}}));
  EXPECT_EQ(i.tmp_size_bytes, 1048576);
  EXPECT_EQ(i.id_range, (IdRange{500000000, 1000}));
  EXPECT_EQ(i.system_dirs, (std::vector<std::string>{"/usr", "/etc"}));
  EXPECT_EQ(i.seccomp_deny, (std::vector<std::string>{"chmod", "fchmod"}));
  EXPECT_EQ(spec.limits.timeout_ms, 5000);
  EXPECT_EQ(spec.limits.grace_ms, 100);
  EXPECT_EQ(spec.limits.memory_bytes, 67108864);
  EXPECT_EQ(spec.limits.pids, 32);
  EXPECT_EQ(spec.limits.address_space_bytes, int64_t{1} << 30);
}

TEST(PolicyTest, ErrorsNameTheKey) {
  auto key = [](const char* text) {
    Spec spec;
    auto bad = ApplyPolicy(text, spec);
    return bad ? bad->key : std::string("(accepted)");
  };
  EXPECT_EQ(key("isolatoin = \"strict\""), "isolatoin");
  EXPECT_EQ(key("isolation = \"max\""), "isolation");
  EXPECT_EQ(key("isolation = 3"), "isolation");
  EXPECT_EQ(key("memory_bytes = \"64M\""), "memory_bytes");
  EXPECT_EQ(key("ro_binds = [{src = \"/a\", dest = \"/b\"}]"), "ro_binds[0].dest");
  EXPECT_EQ(key("binds = [{dst = \"/b\"}]"), "binds[0].src");
  EXPECT_EQ(key("uid_range = {first = 1}"), "uid_range.count");
  EXPECT_EQ(key("seccomp = {allow = [\"x\"]}"), "seccomp.allow");
  EXPECT_EQ(key("system_dirs = [\"/usr\", 3]"), "system_dirs[1]");
  EXPECT_EQ(key("pids = 8"), "(accepted)");
  Spec spec;
  auto syntax = ApplyPolicy("isolation = ", spec);
  ASSERT_TRUE(syntax);
  EXPECT_NE(syntax->message().find("line 1"), std::string::npos) << syntax->message();
}

// toml++ 3.3 has undefined behaviour classifying some code points as
// whitespace (found by fuzz/policy_toml), wherever its scan meets them:
// they are refused before it parses, by line and code point; others pass.
TEST(PolicyTest, CodePointsTheTomlLibraryCannotClassifyAreRefused) {
  auto message = [](const char* text) {
    Spec spec;
    auto bad = ApplyPolicy(text, spec);
    return bad ? bad->message() : std::string("(accepted)");
  };
  EXPECT_NE(message("pids = 8\nmemory_bytes = 1 \u00a1").find("line 2: the character U+00A1"),
            std::string::npos);
  EXPECT_NE(message("system_dirs = [\"/caf\u00e9\"]").find("U+00E9"), std::string::npos);
  EXPECT_NE(message("# \ufc00").find("U+FC00"), std::string::npos);
  EXPECT_NE(message("memory_bytes = 94I'x\u2d00").find("U+2D00"), std::string::npos);
  // Outside those blocks, non-ASCII text in strings and comments is fine.
  EXPECT_EQ(message("# \u4e2d\u6587 \u00a0\nsystem_dirs = [\"/\u4e2d\", '/\u0800']"), "(accepted)");
}

}  // namespace
}  // namespace cordon::contain
