#include "contain/mounts.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>

namespace cordon::contain {
namespace {

bool Has(const MountPlan& plan, MountStep::Op op, const std::string& target) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan.steps()[i].op == op && plan.steps()[i].target == target) return true;
  }
  return false;
}

TEST(MountPlanTest, SystemDirsSecretsAndTheSandboxsOwnParts) {
  MountRequest r;
  r.system_dirs = {"/usr", "/bin", "/no/such/dir", "/etc"};
  r.hidden_paths = {"/etc/shadow", "/etc/no-such-secret", "/root/.ssh"};
  r.binds = {{"/etc/hostname", "/opt/hostname", false}, {"/tmp", "/scratch", true}};
  r.workspace = "/srv/work";
  r.tmp_size_bytes = 1 << 20;
  MountPlan plan = MountPlan::Build(r);

  EXPECT_TRUE(Has(plan, MountStep::Op::kBind, "/usr"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kBind, "/etc"));
  EXPECT_FALSE(Has(plan, MountStep::Op::kBind, "/no/such/dir"));
  // A merged /usr's /bin is a symlink, and stays one.
  struct stat st {};
  if (::lstat("/bin", &st) == 0 && S_ISLNK(st.st_mode)) {
    EXPECT_TRUE(Has(plan, MountStep::Op::kSymlink, "/bin"));
  }
  // Secrets beneath what is shown are covered; others need nothing.
  EXPECT_TRUE(Has(plan, MountStep::Op::kBind, "/etc/shadow"));
  EXPECT_FALSE(Has(plan, MountStep::Op::kBind, "/root/.ssh"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kTmpfs, "/tmp"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kProc, "/proc"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kSymlink, "/dev/fd"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kBind, "/dev/null"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kBind, "/workspace"));
  EXPECT_TRUE(Has(plan, MountStep::Op::kFile, "/opt/hostname"));  // a file bind's mount point
  EXPECT_TRUE(Has(plan, MountStep::Op::kMkdir, "/scratch"));

  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  EXPECT_TRUE(contains(plan.read_only(), "/usr"));
  EXPECT_TRUE(contains(plan.read_only(), "/opt/hostname"));
  EXPECT_TRUE(contains(plan.writable(), "/workspace"));
  EXPECT_TRUE(contains(plan.writable(), "/scratch"));
  EXPECT_FALSE(contains(plan.writable(), "/usr"));
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan.steps()[i].op == MountStep::Op::kBind &&
        plan.steps()[i].target == std::string("/usr")) {
      EXPECT_EQ(plan.Describe(i), "bind /usr at /usr");
    }
  }
}

}  // namespace
}  // namespace cordon::contain
