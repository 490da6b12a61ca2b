// Host paths shown in a sandbox are opened by the supervisor (issue 12):
// binds and closures beneath a directory only root may enter, and a
// workspace on a filesystem that refuses idmapped mounts (ramfs, on every
// kernel so far), made by cordon (given to the sandbox) or the caller's
// (never chowned; the run says what the sandbox may do there).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cordon_cli.h"
#include "run/run_sync.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& content, mode_t mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
  ::chmod(path.c_str(), mode);
}

uid_t Owner(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

// The test's directory (mkdtemp: mode 0700, root's) is the parent only
// root may enter; what is bound lies beneath it, readable by everyone.
class BindTest : public CliTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "a root-only parent needs a root caller";
    ASSERT_EQ(::chmod(work_.path().c_str(), 0700), 0);
    data_ = work_ / "data";
    WriteFile(data_ + "/x", "from the host\n", 0644);
    ::chmod(data_.c_str(), 0755);
  }
  std::string data_;
};

TEST_F(BindTest, ARoBindBeneathARootOnlyParentIsShownAndStaysReadOnly) {
  Ran r = Run({"--ro-bind", data_ + ":/data", "--shell",
               "cat /data/x; echo changed > /data/x; echo write=$?; touch /data/new; "
               "echo create=$?; grep ' /data ' /proc/self/mountinfo"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("from the host\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("write=0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("create=0"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
  // Read-only, nosuid and nodev, as a bind always was.
  EXPECT_NE(r.out.find(" ro,nosuid,nodev"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(data_ + "/x"), "from the host\n");
  EXPECT_FALSE(fs::exists(data_ + "/new"));
}

TEST_F(BindTest, AWritableBindBeneathARootOnlyParentIsWritableWhereItsModesLet) {
  ::chmod(data_.c_str(), 0777);
  Ran r = Run({"--bind", data_ + ":/data", "--shell",
               "cat /data/x && echo made > /data/new && echo changed > /data/x; echo write=$?; "
               "grep ' /data ' /proc/self/mountinfo"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("from the host\n"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(data_ + "/new"), "made\n");
  // x is root's, mode 0644: the sandbox's outside id may not write it.
  EXPECT_EQ(r.out.find("write=0"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(data_ + "/x"), "from the host\n");
  EXPECT_NE(r.out.find(" rw,nosuid,nodev"), std::string::npos) << r.out;
  EXPECT_GE(Owner(data_ + "/new"), contain::kDefaultIdRange.first);
}

TEST_F(BindTest, AClosureBeneathARootOnlyParentRuns) {
  const std::string dir = work_ / "closure";
  fs::create_directories(dir + "/bin");
  fs::copy_file("/bin/echo", dir + "/bin/echo");
  ::chmod(dir.c_str(), 0755);
  ::chmod((dir + "/bin").c_str(), 0755);
  ::chmod((dir + "/bin/echo").c_str(), 0555);
  WriteFile(dir + "/bin/hello.sh", "#!/bin/sh\necho \"hello $1\"\n", 0555);
  Ran made = Cordon({"closure", "make", dir}).Wait();
  ASSERT_EQ(made.status, 0) << made.err;
  const std::string manifest = dir + "/.cordon/manifest.json";
  WriteFile(manifest, made.out, 0444);
  ::chmod((dir + "/.cordon").c_str(), 0755);
  Ran pin = Cordon({"closure", "pin", manifest}).Wait();
  ASSERT_EQ(pin.status, 0) << pin.err;
  const std::string hex = pin.out.substr(0, 64);
  Ran echo = Run({"--closure", dir, "--pin", hex, "--", "bin/echo", "from", "the", "closure"});
  EXPECT_EQ(echo.status, 0) << echo.err;
  EXPECT_EQ(echo.out, "from the closure\n");
  // A script finds its interpreter's view of the closure where it is.
  Ran script = Run({"--closure", dir, "--pin", hex, "--", "bin/hello.sh", "world"});
  EXPECT_EQ(script.status, 0) << script.err;
  EXPECT_EQ(script.out, "hello world\n");
}

TEST_F(BindTest, AMissingSourceIsNamedWithItsOption) {
  Ran r = Run({"--ro-bind", data_ + "/nothing:/data", "--", "/bin/true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("--ro-bind"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(data_ + "/nothing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
}

// A ramfs refuses MOUNT_ATTR_IDMAP (it has no FS_ALLOW_IDMAP), as tmpfs
// does before Linux 6.3: a workspace on it is shown un-idmapped.
class UnidmappedWorkspaceTest : public CliTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a ramfs and leasing ids need root";
    ramfs_ = work_ / "ramfs";
    fs::create_directories(ramfs_);
    if (::mount("ramfs", ramfs_.c_str(), "ramfs", MS_NOSUID | MS_NODEV, "mode=0700") != 0) {
      GTEST_SKIP() << "cannot mount a ramfs: " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(::umount2(ramfs_.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    }
  }
  std::string ramfs_;
  bool mounted_ = false;
};

// A caller's directory is never chowned: the sandbox gets what its outside
// id may, and the run says so.
TEST_F(UnidmappedWorkspaceTest, ACallersDirectoryIsNotChownedAndTheRunSaysWhatTheSandboxMay) {
  const std::string ws = ramfs_ + "/mine";
  ASSERT_EQ(::mkdir(ws.c_str(), 0755), 0);
  WriteFile(ws + "/readme", "readable\n", 0644);
  Ran r = Run({"--json", "--workspace", ws, "--shell", "cat readme; touch made; echo create=$?"});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  json j = r.Json();
  EXPECT_NE(j["stdout"].get<std::string>().find("readable\n"), std::string::npos) << j;
  EXPECT_EQ(j["stdout"].get<std::string>().find("create=0"), std::string::npos) << j;
  std::string warnings = j["warnings"].dump();
  EXPECT_NE(warnings.find("the workspace " + ws + " is not idmapped"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("MOUNT_ATTR_IDMAP"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("can read and write there only what that uid may"), std::string::npos)
      << warnings;
  EXPECT_EQ(Owner(ws), 0u);
  EXPECT_EQ(Owner(ws + "/readme"), 0u);
  EXPECT_FALSE(fs::exists(ws + "/made"));
}

// A workspace cordon made (as the daemon makes a session's, mode 0700 and
// root's, beneath a root-only state directory) is given to the sandbox:
// all that is in it, never what a link inside points to.
TEST_F(UnidmappedWorkspaceTest, AWorkspaceCordonMadeIsGivenToTheSandbox) {
  const std::string ws = ramfs_ + "/workspaces/s1";
  fs::create_directories(ws + "/sub");
  ASSERT_EQ(::chmod(ws.c_str(), 0700), 0);
  WriteFile(ws + "/sub/old", "from before\n", 0600);
  const std::string outside = work_ / "outside";
  WriteFile(outside, "not the workspace's\n", 0600);
  fs::create_symlink(outside, ws + "/link");

  auto store = store::Store::Open(state_.path());
  ASSERT_TRUE(store) << store.error().message();
  contain::Spec spec;
  spec.shell = "echo hi > f && cat f && cat sub/old && echo more >> sub/old && id -u";
  spec.workspace = ws;
  spec.isolation.workspace_made = true;
  auto ran = run::RunSync(spec, TestProbe(), *store, {});
  ASSERT_TRUE(ran) << ran.error().message;
  const run::RunResult& r = ran->result;
  std::string warnings = Joined(r.warnings);
  EXPECT_EQ(r.exit_code, 0) << r.err.data << warnings;
  EXPECT_EQ(r.out.data, "hi\nfrom before\n0\n") << r.err.data << warnings;
  EXPECT_NE(warnings.find("is not idmapped"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("cordon made it, so it was given (chowned)"), std::string::npos)
      << warnings;
  const uid_t given = Owner(ws);
  EXPECT_GE(given, contain::kDefaultIdRange.first);
  EXPECT_EQ(Owner(ws + "/f"), given);
  EXPECT_EQ(Owner(ws + "/sub"), given);
  EXPECT_EQ(Owner(ws + "/sub/old"), given);
  EXPECT_EQ(Owner(ws + "/link"), given);  // the link itself
  EXPECT_EQ(Owner(outside), 0u);          // not what it points to
  EXPECT_EQ(Slurp(outside), "not the workspace's\n");
}

}  // namespace
}  // namespace cordon::testing
