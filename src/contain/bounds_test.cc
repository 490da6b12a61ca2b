#include "contain/bounds.h"

#include <gtest/gtest.h>

namespace cordon::contain {
namespace {

TEST(BoundsTest, WhatARequestLeavesUnsetGetsTheDefaultMarkedDefaulted) {
  Bounds b;
  Spec spec;
  spec.limits.memory_bytes = 64 << 20;
  ASSERT_FALSE(ApplyBounds(b, spec));
  EXPECT_EQ(spec.limits.memory_bytes, 64 << 20);  // the request's own
  EXPECT_EQ(spec.limits.pids, 512);
  EXPECT_EQ(spec.limits.cpu, 1.0);
  EXPECT_EQ(spec.limits.disk_bytes, int64_t{10} << 30);
  EXPECT_EQ(spec.limits.disk_inodes, 1 << 20);
  EXPECT_EQ(spec.defaulted,
            (std::set<Capability>{Capability::kProcessCount, Capability::kCpu, Capability::kDisk}));
  // Defaulted limits are wanted, but not explicit: never refused.
  EXPECT_TRUE(Wanted(spec).contains(Capability::kCpu));
  EXPECT_FALSE(Explicit(spec).contains(Capability::kCpu));
  EXPECT_TRUE(Explicit(spec).contains(Capability::kMemory));
}

TEST(BoundsTest, EitherDiskLimitAskedForMakesTheDiskTheCallersOwn) {
  Spec spec;
  spec.limits.disk_inodes = 100;
  ASSERT_FALSE(ApplyBounds(Bounds{}, spec));
  EXPECT_EQ(spec.limits.disk_bytes, int64_t{10} << 30);  // filled in
  EXPECT_FALSE(spec.defaulted.contains(Capability::kDisk));
  EXPECT_TRUE(Explicit(spec).contains(Capability::kDisk));
}

TEST(BoundsTest, ALimitAboveItsCeilingNamesTheFieldAndTheCeilingAndChangesNothing) {
  Bounds b;
  b.max_memory_bytes = 512 << 20;
  b.max_cpu = 2;
  Spec spec;
  spec.limits.cpu = 2.5;
  auto e = ApplyBounds(b, spec);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "limits.cpu");
  EXPECT_NE(e->message.find("2.5 is above this daemon's ceiling of 2 (cordon serve --max-cpu)"),
            std::string::npos)
      << e->message;
  EXPECT_FALSE(spec.limits.memory_bytes);  // nothing filled in
  EXPECT_TRUE(spec.defaulted.empty());
  spec.limits.cpu = 2;  // at the ceiling: fine
  EXPECT_FALSE(ApplyBounds(b, spec));
}

TEST(BoundsTest, AnIsolationBelowTheFloorIsRefusedNamingTheFloorAndChangesNothing) {
  Bounds b;  // the floor is standard unless the operator lowers it
  Spec spec;
  spec.isolation.level = Isolation::kNone;
  auto e = ApplyBounds(b, spec);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "isolation");
  EXPECT_EQ(e->message,
            "isolation: none is below this daemon's floor of standard (cordon serve "
            "--min-isolation)");
  EXPECT_FALSE(spec.limits.pids);  // nothing filled in
  b.min_isolation = Isolation::kStrict;
  spec.isolation.level = Isolation::kStandard;
  EXPECT_TRUE(ApplyBounds(b, spec));
  spec.isolation.level = Isolation::kStrict;
  EXPECT_FALSE(ApplyBounds(b, spec));
  b.min_isolation = Isolation::kNone;
  spec.isolation.level = Isolation::kNone;
  EXPECT_FALSE(ApplyBounds(b, spec));
}

TEST(BoundsTest, TheHostsNetworkIsRefusedUnlessTheOperatorAllowsIt) {
  Bounds b;
  Spec spec;
  spec.isolation.network = Network::kHost;
  auto e = ApplyBounds(b, spec);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "isolation.network");
  EXPECT_NE(e->message.find("--allow-network-host"), std::string::npos) << e->message;
  EXPECT_FALSE(spec.limits.pids);  // nothing filled in
  b.allow_network_host = true;
  EXPECT_FALSE(ApplyBounds(b, spec));
}

TEST(BoundsTest, ADefaultAboveItsCeilingIsNamedByItsOptions) {
  Bounds b;
  EXPECT_FALSE(BoundsProblem(b));
  b.max_pids = 100;
  EXPECT_EQ(BoundsProblem(b), "--default-pids (512) is above --max-pids (100)");
}

// A default or a ceiling no request could ask for would refuse every run
// that takes it; the daemon names it at start instead.
TEST(BoundsTest, ADefaultOrCeilingOutsideItsLimitsRangeIsNamedByItsOption) {
  Bounds b;
  b.pids = (int64_t{4} << 20) + 1;
  EXPECT_EQ(BoundsProblem(b), "--default-pids: must be at most 4194304 (the most pids Linux has)");
  b = Bounds{};
  b.max_disk_inodes = (int64_t{1} << 32) + 1;
  auto problem = BoundsProblem(b);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(problem->starts_with("--max-inodes: must be at most 4294967296")) << *problem;
  b = Bounds{};
  b.cpu = 5000;
  problem = BoundsProblem(b);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(problem->starts_with("--default-cpu: ")) << *problem;
  b = Bounds{};
  b.max_disk_inodes = int64_t{1} << 32;  // the most: fine
  EXPECT_FALSE(BoundsProblem(b));
}

}  // namespace
}  // namespace cordon::contain
