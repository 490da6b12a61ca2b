#include "contain/spec.h"

#include <gtest/gtest.h>

#include <limits>

#include "support.h"

namespace cordon::contain {
namespace {

Spec Valid() {
  Spec s;
  s.argv = {"/bin/true"};
  return s;
}

std::string FieldOf(const Spec& s) {
  auto e = Validate(s);
  return e ? e->field : "";
}

TEST(SpecTest, AValidSpecPasses) {
  EXPECT_FALSE(Validate(Valid()));
  Spec shell;
  shell.shell = "echo hi";
  EXPECT_FALSE(Validate(shell));
  EXPECT_EQ(shell.Command(), (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
}

TEST(SpecTest, EachBadCommandIsNamed) {
  Spec empty;
  EXPECT_EQ(FieldOf(empty), "argv");
  EXPECT_NE(Validate(empty)->reason.find("empty"), std::string::npos);
  Spec empty_prog = Valid();
  empty_prog.argv = {""};
  EXPECT_EQ(FieldOf(empty_prog), "argv");
  Spec nul = Valid();
  nul.argv.push_back(std::string("a\0b", 3));
  EXPECT_EQ(FieldOf(nul), "argv");
  Spec both = Valid();
  both.shell = "x";
  EXPECT_EQ(FieldOf(both), "argv");
  Spec empty_shell;
  empty_shell.shell = "";
  EXPECT_EQ(FieldOf(empty_shell), "shell");
}

TEST(SpecTest, EnvNamesAndValuesAreChecked) {
  for (auto [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"", "x"}, {"A=B", "x"}, {std::string("A\0B", 3), "x"}, {"A", std::string("x\0y", 3)}}) {
    Spec s = Valid();
    s.env = {{name, value}};
    EXPECT_EQ(FieldOf(s), "env") << name;
  }
  Spec dup = Valid();
  dup.env = {{"A", "1"}, {"A", "2"}};
  EXPECT_EQ(FieldOf(dup), "env");
  Spec fine = Valid();
  fine.env = {{"A", ""}, {"B", "x=y"}};
  EXPECT_FALSE(Validate(fine));
}

TEST(SpecTest, WorkspaceMustBeAnExistingDirectory) {
  testing::TempDir dir;
  Spec s = Valid();
  s.workspace = dir.path();
  EXPECT_FALSE(Validate(s));
  s.workspace = dir / "missing";
  EXPECT_EQ(FieldOf(s), "workspace");
  EXPECT_NE(Validate(s)->reason.find("No such file"), std::string::npos);
  s.workspace = "/etc/hostname";
  EXPECT_EQ(FieldOf(s), "workspace");
  EXPECT_NE(Validate(s)->reason.find("not a directory"), std::string::npos);
}

TEST(SpecTest, LimitsMustBePositive) {
  struct Case {
    std::function<void(Limits&)> set;
    const char* field;
  };
  const Case cases[] = {
      {[](Limits& l) { l.timeout_ms = 0; }, "limits.timeout_ms"},
      {[](Limits& l) { l.timeout_ms = -5; }, "limits.timeout_ms"},
      {[](Limits& l) { l.grace_ms = -1; }, "limits.grace_ms"},
      // Past a year: INT64_MAX made the deadline overflow and pass at once.
      {[](Limits& l) { l.timeout_ms = kMaxDurationMs + 1; }, "limits.timeout_ms"},
      {[](Limits& l) { l.timeout_ms = std::numeric_limits<int64_t>::max(); }, "limits.timeout_ms"},
      {[](Limits& l) { l.grace_ms = kMaxDurationMs + 1; }, "limits.grace_ms"},
      {[](Limits& l) { l.output_limit_bytes = 0; }, "limits.output_limit_bytes"},
      {[](Limits& l) { l.output_limit_bytes = int64_t{2} << 30; }, "limits.output_limit_bytes"},
      {[](Limits& l) { l.memory_bytes = 0; }, "limits.memory_bytes"},
      {[](Limits& l) { l.pids = -1; }, "limits.pids"},
      {[](Limits& l) { l.pids = (int64_t{4} << 20) + 1; }, "limits.pids"},
      {[](Limits& l) { l.cpu_seconds = 0; }, "limits.cpu_seconds"},
      {[](Limits& l) { l.cpu = 0.001; }, "limits.cpu"},  // enforced would be 0.01
      {[](Limits& l) { l.file_size_bytes = 0; }, "limits.file_size_bytes"},
      {[](Limits& l) { l.open_files = 0; }, "limits.open_files"},
      {[](Limits& l) { l.open_files = 1 << 21; }, "limits.open_files"},
      {[](Limits& l) { l.address_space_bytes = -1; }, "limits.address_space_bytes"},
      // tmpfs refused such a count inside the sandbox (its setup failed).
      {[](Limits& l) { l.disk_inodes = (int64_t{1} << 32) + 1; }, "limits.disk_inodes"},
  };
  for (const auto& c : cases) {
    Spec s = Valid();
    c.set(s.limits);
    EXPECT_EQ(FieldOf(s), c.field);
  }
  Spec zero_grace = Valid();
  zero_grace.limits.grace_ms = 0;  // SIGKILL at the deadline: allowed
  EXPECT_FALSE(Validate(zero_grace));
  Spec most_inodes = Valid();
  most_inodes.limits.disk_inodes = int64_t{1} << 32;
  EXPECT_FALSE(Validate(most_inodes));
  Spec a_year = Valid();
  a_year.limits.timeout_ms = a_year.limits.grace_ms = kMaxDurationMs;
  EXPECT_FALSE(Validate(a_year));
}

// Before, one pid under isolation failed every run at its start (the
// sandbox's init took it: init EAGAIN), naming neither the field nor why.
TEST(SpecTest, OnePidIsTooFewForASandboxWithItsOwnInit) {
  Spec s = Valid();
  s.limits.pids = 1;
  s.isolation.level = Isolation::kStandard;
  EXPECT_EQ(FieldOf(s), "limits.pids");
  EXPECT_NE(Validate(s)->message().find("the sandbox's init is one of them"), std::string::npos);
  s.limits.pids = 2;
  EXPECT_FALSE(Validate(s));
  s.limits.pids = 1;
  s.isolation.level = Isolation::kNone;  // no init: the command alone
  EXPECT_FALSE(Validate(s));
}

TEST(SpecTest, OwnerHasNoControlCharacters) {
  Spec s = Valid();
  s.owner = "agent\n1";
  EXPECT_EQ(FieldOf(s), "owner");
  s.owner = std::string(300, 'a');
  EXPECT_EQ(FieldOf(s), "owner");
}

TEST(SpecTest, WantedAndExplicitCapabilities) {
  Spec s = Valid();
  s.isolation.level = Isolation::kNone;
  EXPECT_EQ(Wanted(s), (std::set<Capability>{Capability::kProcessTree, Capability::kOutputCap}));
  EXPECT_TRUE(Explicit(s).empty());
  s.limits.memory_bytes = 1 << 20;
  s.limits.timeout_ms = 1000;
  s.required = {Capability::kCpuTime};
  EXPECT_EQ(Explicit(s), (std::set<Capability>{Capability::kMemory, Capability::kWallClock}));
  // Required is not wanted: no limit sets it up (admission refuses it).
  EXPECT_FALSE(Wanted(s).contains(Capability::kCpuTime));
  EXPECT_EQ(NotWantedReason(s, Capability::kCpuTime),
            "no limit asks for it: set limits.cpu_seconds (--cpu-seconds)");
  EXPECT_TRUE(Wanted(s).contains(Capability::kMemory));

  s.isolation.level = Isolation::kStandard;  // the default
  for (Capability c : kIsolationCapabilities) EXPECT_TRUE(Wanted(s).contains(c));
  s.isolation.network = Network::kHost;  // given up on purpose: not wanted
  EXPECT_FALSE(Wanted(s).contains(Capability::kNetwork));
  EXPECT_EQ(NotWantedReason(s, Capability::kNetwork), "network host shares the host's network");
}

TEST(SpecTest, IsolationSettingsAreChecked) {
  auto field = [](auto change) {
    Spec s = Valid();
    change(s.isolation);
    return FieldOf(s);
  };
  EXPECT_EQ(field([](IsolationSpec& i) { i.binds = {{"relative", "/x", false}}; }), "binds");
  EXPECT_EQ(field([](IsolationSpec& i) { i.binds = {{"/etc", "/a/../b", false}}; }), "binds");
  EXPECT_EQ(field([](IsolationSpec& i) { i.binds = {{"/etc", "/proc/x", false}}; }), "binds");
  EXPECT_EQ(field([](IsolationSpec& i) { i.binds = {{"/nonexistent", "/x", false}}; }), "binds");
  EXPECT_EQ(field([](IsolationSpec& i) { i.binds = {{"/etc", "/", true}}; }), "binds");
  EXPECT_EQ(field([](IsolationSpec& i) {
              i.level = Isolation::kNone;
              i.binds = {{"/etc", "/etc", false}};
            }),
            "binds");
  EXPECT_EQ(field([](IsolationSpec& i) { i.tmp_size_bytes = 0; }), "tmp_size_bytes");
  EXPECT_EQ(field([](IsolationSpec& i) { i.id_range = {60000, 10000}; }), "uid_range");
  EXPECT_EQ(field([](IsolationSpec& i) { i.id_range = {0, 10}; }), "uid_range");
  EXPECT_EQ(field([](IsolationSpec& i) { i.seccomp_deny = {"no_such_call"}; }), "seccomp.deny");
  EXPECT_EQ(field([](IsolationSpec& i) { i.system_dirs = {"/"}; }), "system_dirs");
  Spec root = Valid();
  root.workspace = "/";
  EXPECT_EQ(FieldOf(root), "workspace");  // the whole host, writable inside
  root.isolation.level = Isolation::kNone;
  EXPECT_EQ(FieldOf(root), "");
  EXPECT_EQ(field([](IsolationSpec& i) {
              i.binds = {{"/etc", "/opt/etc", false}};
              i.seccomp_deny = {"chmod"};
            }),
            "");
}

}  // namespace
}  // namespace cordon::contain
