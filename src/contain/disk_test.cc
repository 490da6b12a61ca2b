#include "contain/disk.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <linux/quota.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "contain/probe.h"
#include "session/files.h"
#include "support.h"
#include "sys/fd.h"

namespace cordon::contain {
namespace {

using std::chrono::steady_clock;

// Whether `path` is a mount point in this mount namespace.
bool Mounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string f[5];
    for (auto& x : f) fields >> x;
    if (f[4] == path) return true;
  }
  return false;
}

// Loop devices whose backing file is under `prefix`.
int LoopsBackedBy(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/block", ec)) {
    std::string name = e.path().filename().string();
    if (!name.starts_with("loop")) continue;
    std::string backing = testing::Slurp(e.path().string() + "/loop/backing_file");
    if (backing.starts_with(prefix)) ++n;
  }
  return n;
}

// A loop device frees itself once its mount is gone; the kernel may finish
// that just after umount2 returns.
bool NoLoopsBackedBy(const std::string& prefix) {
  auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (LoopsBackedBy(prefix) != 0) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Writes 1 MiB chunks to dir/name until a write fails; returns the errno
// and how much was written.
std::pair<int, int64_t> Fill(const std::string& path, int64_t most) {
  sys::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return {errno, 0};
  std::string chunk(1 << 20, 'x');
  int64_t written = 0;
  while (written < most) {
    ssize_t n = ::write(fd.get(), chunk.data(), chunk.size());
    if (n < 0) return {errno, written};
    written += n;
  }
  if (::fsync(fd.get()) != 0) return {errno, written};
  return {0, written};
}

// Creates empty files until one fails; returns the errno and the count.
std::pair<int, int> Touch(const std::string& dir, int most) {
  for (int i = 0; i < most; ++i) {
    int fd = ::open((dir + "/f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return {errno, i};
    ::close(fd);
  }
  return {0, most};
}

DiskSupport Nothing() {
  DiskSupport s;
  s.state_dir = "/var/lib/cordon";
  s.filesystem = "ext4";
  s.project_quota_problem = "project quotas are off";
  s.tmpfs_problem = "mount(tmpfs): EPERM";
  s.loop_problem = "mounting an image needs root";
  return s;
}

TEST(DiskStatusTest, NothingToBoundWithGivesTheReasonAndTheFix) {
  for (WorkspaceKind kind : {WorkspaceKind::kEphemeral, WorkspaceKind::kPersistent}) {
    CapabilityStatus s = DiskStatus(Nothing(), kind);
    EXPECT_EQ(s.capability, Capability::kDisk);
    EXPECT_FALSE(s.enforceable);
    EXPECT_NE(s.reason.find("project quotas are off"), std::string::npos) << s.reason;
    EXPECT_NE(s.reason.find("mounting an image needs root"), std::string::npos) << s.reason;
    EXPECT_NE(s.fix.find("prjquota"), std::string::npos) << s.fix;
    EXPECT_NE(s.fix.find("loop"), std::string::npos) << s.fix;
  }
  EXPECT_FALSE(DiskProbeStatus(Nothing()).enforceable);
  // The CLI probes nothing: the caller's own directory is not bounded.
  CapabilityStatus cli = DiskStatus(DiskSupport{}, WorkspaceKind::kEphemeral);
  EXPECT_FALSE(cli.enforceable);
  EXPECT_NE(cli.reason.find("daemon's workspaces"), std::string::npos) << cli.reason;
}

TEST(DiskStatusTest, StrongestMechanismPerKind) {
  DiskSupport s = Nothing();
  s.tmpfs = true;
  EXPECT_EQ(DiskStatus(s, WorkspaceKind::kEphemeral).mechanism, "tmpfs");
  EXPECT_FALSE(DiskStatus(s, WorkspaceKind::kPersistent).enforceable);
  CapabilityStatus probe = DiskProbeStatus(s);
  EXPECT_FALSE(probe.enforceable);
  EXPECT_NE(probe.reason.find("session workspaces cannot be bounded"), std::string::npos);
  s.loop_images = true;
  EXPECT_EQ(DiskStatus(s, WorkspaceKind::kPersistent).mechanism, "loop_image");
  EXPECT_EQ(DiskProbeStatus(s).mechanism, "tmpfs+loop_image");
  s.project_quota = true;
  EXPECT_EQ(DiskStatus(s, WorkspaceKind::kEphemeral).mechanism, "project_quota");
  EXPECT_EQ(DiskStatus(s, WorkspaceKind::kPersistent).mechanism, "project_quota");
  EXPECT_EQ(DiskProbeStatus(s).mechanism, "project_quota");
  nlohmann::json j = ToJson(s);
  EXPECT_EQ(j["persistent"], "project_quota");
  EXPECT_TRUE(j["loop_images"].get<bool>());
}

TEST(DiskStatusTest, AnUnboundedWorkspaceIsNotClaimed) {
  testing::TempDir dir;
  DiskSupport s = Nothing();
  s.state_dir = dir.path();
  s.tmpfs = s.loop_images = true;
  CapabilityStatus st = WorkspaceDiskStatus(s, dir.path(), DiskLimits{1 << 20, 100}, false);
  EXPECT_FALSE(st.enforceable);
  EXPECT_NE(st.reason.find("is not bounded"), std::string::npos) << st.reason;
  EXPECT_FALSE(st.fix.empty());
}

class DiskMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    support_ = ProbeDisk(state_.path());
    // The probe's own scratch directories are gone again.
    for (const auto& e : std::filesystem::directory_iterator(state_.path())) {
      ADD_FAILURE() << "the probe left " << e.path();
    }
  }
  void TearDown() override {
    for (const auto& dir : made_) {
      (void)RemoveBoundWorkspace(dir);
      EXPECT_FALSE(Mounted(dir)) << dir;
    }
    EXPECT_TRUE(NoLoopsBackedBy(state_.path())) << "a loop device is left";
  }
  std::string Workspace(const std::string& name) {
    std::string dir = state_ / name;
    EXPECT_EQ(::mkdir(dir.c_str(), 0700), 0);
    made_.push_back(dir);
    return dir;
  }
  testing::TempDir state_;
  DiskSupport support_;
  std::vector<std::string> made_;
};

TEST_F(DiskMountTest, TmpfsStopsWritesAndFilesAtTheBound) {
  if (!support_.tmpfs) GTEST_SKIP() << "no tmpfs can be mounted here: " << support_.tmpfs_problem;
  support_.project_quota = false;
  const std::string ws = Workspace("scratch");
  const DiskLimits limits{4 << 20, 32};
  auto bound = BoundWorkspace(support_, ws, WorkspaceKind::kEphemeral, limits);
  ASSERT_TRUE(bound) << bound.error().message();
  EXPECT_EQ(*bound, "tmpfs");
  EXPECT_TRUE(Mounted(ws));
  struct stat st {};
  ASSERT_EQ(::stat(ws.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto observed = ObserveBound(ws, limits);
  ASSERT_TRUE(observed) << observed.error().message();
  EXPECT_EQ(*observed, "tmpfs");
  EXPECT_TRUE(WorkspaceDiskStatus(support_, ws, limits, false).enforceable);
  // A bound larger than asked is not the bound asked for.
  EXPECT_FALSE(ObserveBound(ws, DiskLimits{1 << 20, std::nullopt}));

  auto [err, written] = Fill(ws + "/big", 64 << 20);
  EXPECT_EQ(err, ENOSPC);
  EXPECT_LE(written, 4 << 20);
  ASSERT_EQ(::unlink((ws + "/big").c_str()), 0);
  auto [ierr, files] = Touch(ws, 1000);
  EXPECT_EQ(ierr, ENOSPC);
  EXPECT_LT(files, 32);

  ASSERT_TRUE(RemoveBoundWorkspace(ws));
  EXPECT_FALSE(Mounted(ws));
  EXPECT_NE(::access(ws.c_str(), F_OK), 0);
}

TEST_F(DiskMountTest, LoopImageStopsWritesAndIsMountedAgainWhenReused) {
  if (!support_.loop_images) {
    GTEST_SKIP() << "no loop image can be mounted here: " << support_.loop_problem;
  }
  support_.project_quota = support_.tmpfs = false;
  ASSERT_EQ(::mkdir((state_ / "workspaces").c_str(), 0700), 0);
  const std::string ws = Workspace("workspaces/w");
  const DiskLimits limits{16 << 20, 64};
  auto started = steady_clock::now();
  auto bound = BoundWorkspace(support_, ws, WorkspaceKind::kPersistent, limits);
  ASSERT_TRUE(bound) << bound.error().message();
  std::cout << "first image (mkfs): "
            << std::chrono::duration<double, std::milli>(steady_clock::now() - started).count()
            << " ms\n";
  EXPECT_EQ(*bound, "loop_image");
  EXPECT_TRUE(Mounted(ws));
  EXPECT_EQ(::access((ws + ".img").c_str(), F_OK), 0);
  struct stat st {};
  ASSERT_EQ(::stat(ws.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::getuid());
  EXPECT_NE(::access((ws + "/lost+found").c_str(), F_OK), 0) << "mkfs's lost+found is left";
  auto observed = ObserveBound(ws, limits);
  ASSERT_TRUE(observed) << observed.error().message();
  EXPECT_EQ(*observed, "loop_image");

  auto [err, written] = Fill(ws + "/big", 64 << 20);
  EXPECT_EQ(err, ENOSPC);
  EXPECT_LE(written, 16 << 20);
  ASSERT_EQ(::unlink((ws + "/big").c_str()), 0);
  auto [ierr, files] = Touch(ws, 1000);
  EXPECT_EQ(ierr, ENOSPC);
  EXPECT_LT(files, 64);
  ASSERT_TRUE(sys::WriteFile(ws + "/f0", "kept"));

  // The host restarted: the image is there, its mount is not.
  ASSERT_TRUE(ReleaseWorkspace(ws));
  EXPECT_FALSE(Mounted(ws));
  EXPECT_EQ(::access((ws + ".img").c_str(), F_OK), 0) << "the image goes with the mount";
  ASSERT_TRUE(NoLoopsBackedBy(state_.path()));
  EXPECT_NE(::access((ws + "/f0").c_str(), F_OK), 0);
  auto again = BoundWorkspace(support_, ws, WorkspaceKind::kPersistent, limits);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(*again, "loop_image");
  EXPECT_EQ(testing::Slurp(ws + "/f0"), "kept");
  // Already mounted (the daemon restarted, the host did not): kept as it is.
  ASSERT_TRUE(BoundWorkspace(support_, ws, WorkspaceKind::kPersistent, limits));
  EXPECT_EQ(testing::Slurp(ws + "/f0"), "kept");

  // The second image of the same size is a copy of the first's template.
  const std::string other = Workspace("workspaces/v");
  started = steady_clock::now();
  ASSERT_TRUE(BoundWorkspace(support_, other, WorkspaceKind::kPersistent, limits));
  std::cout << "second image (copy): "
            << std::chrono::duration<double, std::milli>(steady_clock::now() - started).count()
            << " ms\n";
  EXPECT_NE(::access((other + "/f0").c_str(), F_OK), 0) << "a copy of another's files";

  ASSERT_TRUE(RemoveBoundWorkspace(ws));
  EXPECT_FALSE(Mounted(ws));
  EXPECT_NE(::access(ws.c_str(), F_OK), 0);
  EXPECT_NE(::access((ws + ".img").c_str(), F_OK), 0);
}

// Reserved, an image holds its whole size of the state directory's
// filesystem from the start; one made sparse is reserved when it is
// mounted again.
TEST_F(DiskMountTest, AReservedImageHoldsItsWholeSize) {
  if (!support_.loop_images) {
    GTEST_SKIP() << "no loop image can be mounted here: " << support_.loop_problem;
  }
  support_.project_quota = support_.tmpfs = false;
  ASSERT_EQ(::mkdir((state_ / "workspaces").c_str(), 0700), 0);
  const DiskLimits limits{32 << 20, 64};
  auto allocated = [](const std::string& image) {
    struct stat st {};
    EXPECT_EQ(::stat(image.c_str(), &st), 0) << image;
    return static_cast<int64_t>(st.st_blocks) * 512;
  };

  const std::string sparse = Workspace("workspaces/sparse");
  ASSERT_TRUE(BoundWorkspace(support_, sparse, WorkspaceKind::kPersistent, limits));
  EXPECT_LT(allocated(sparse + ".img"), *limits.bytes / 2);

  DiskSupport reserving = support_;
  reserving.reserve_images = true;
  const std::string reserved = Workspace("workspaces/reserved");
  auto bound = BoundWorkspace(reserving, reserved, WorkspaceKind::kPersistent, limits);
  ASSERT_TRUE(bound) << bound.error().message();
  EXPECT_EQ(*bound, "loop_image");
  EXPECT_GE(allocated(reserved + ".img"), *limits.bytes);
  EXPECT_TRUE(ObserveBound(reserved, limits));

  ASSERT_TRUE(ReleaseWorkspace(sparse));
  ASSERT_TRUE(BoundWorkspace(reserving, sparse, WorkspaceKind::kPersistent, limits));
  EXPECT_GE(allocated(sparse + ".img"), *limits.bytes);
}

TEST_F(DiskMountTest, AWorkspaceWithFilesIsNotBoundedAfterwards) {
  if (!support_.loop_images) {
    GTEST_SKIP() << "no loop image can be mounted here: " << support_.loop_problem;
  }
  support_.project_quota = false;
  const std::string ws = Workspace("old");
  std::ofstream(ws + "/notes") << "x";
  auto bound = BoundWorkspace(support_, ws, WorkspaceKind::kPersistent, DiskLimits{16 << 20, {}});
  ASSERT_FALSE(bound);
  EXPECT_NE(bound.error().message().find("fresh_workspace"), std::string::npos);
  EXPECT_FALSE(Mounted(ws));
  EXPECT_EQ(testing::Slurp(ws + "/notes"), "x");
}

// The daemon's uploads stop at the bound too, with an error that names it
// and no partial file.
TEST_F(DiskMountTest, FilesApiUploadPastTheBoundIsRefusedWhole) {
  if (!support_.tmpfs) GTEST_SKIP() << "no tmpfs can be mounted here: " << support_.tmpfs_problem;
  support_.project_quota = false;
  const std::string ws = Workspace("files");
  ASSERT_TRUE(BoundWorkspace(support_, ws, WorkspaceKind::kEphemeral, DiskLimits{1 << 20, 8}));
  auto fd = sys::Open(ws, O_PATH | O_DIRECTORY);
  ASSERT_TRUE(fd);
  std::string body(2 << 20, 'y');
  auto put = session::PutFile(fd->get(), session::PutRequest{"big", {}, {}, 16 << 20}, body);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind, session::Error::Kind::kTooLarge);
  EXPECT_NE(put.error().message.find("limits.disk_bytes"), std::string::npos)
      << put.error().message;
  // An append that does not fit leaves the file as it was.
  ASSERT_TRUE(session::PutFile(fd->get(), session::PutRequest{"log", {}, {}, 16 << 20}, "head"));
  auto append = session::PutFile(fd->get(), session::PutRequest{"log", 4, {}, 16 << 20}, body);
  ASSERT_FALSE(append);
  EXPECT_EQ(append.error().kind, session::Error::Kind::kTooLarge);
  EXPECT_EQ(testing::Slurp(ws + "/log"), "head");
  // Out of inodes: a 413 too, not a 500.
  session::Outcome<session::FileInfo> last;
  for (int i = 0; i < 16; ++i) {
    last = session::PutFile(fd->get(),
                            session::PutRequest{"d" + std::to_string(i) + "/f", {}, {}, 1024}, "z");
    if (!last) break;
  }
  ASSERT_FALSE(last);
  EXPECT_EQ(last.error().kind, session::Error::Kind::kTooLarge) << last.error().message;
  auto listing = session::ListFiles(fd->get(), "");
  ASSERT_TRUE(listing);
  for (const auto& e : *listing) {
    EXPECT_FALSE(e["name"].get<std::string>().starts_with(".cordon-upload-")) << *listing;
  }
}

// Project quotas need an ext4 with the project and quota features mounted
// with prjquota: the test makes one in an image of its own.
TEST(DiskQuotaTest, ProjectQuotaOnExt4StopsAnUnprivilegedWriter) {
  testing::TempDir dir;
  const std::string image = dir / "fs.img";
  const std::string mnt = dir / "mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  {
    sys::UniqueFd fd(::open(image.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd);
    ASSERT_EQ(::ftruncate(fd.get(), 128 << 20), 0);
  }
  std::string mkfs = "/sbin/mkfs.ext4 -q -F -O quota,project -I 256 " + image + " 2>&1";
  if (std::system(mkfs.c_str()) != 0) GTEST_SKIP() << "mkfs.ext4 -O quota,project failed";
  std::string mount = "mount -o loop,prjquota " + image + " " + mnt + " 2>/dev/null";
  if (std::system(mount.c_str()) != 0) {
    GTEST_SKIP() << "this kernel cannot mount ext4 with project quotas (see dmesg: "
                    "CONFIG_QUOTA and CONFIG_QFMT_V2)";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string state = mnt + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  DiskSupport support = ProbeDisk(state);
  ASSERT_TRUE(support.project_quota) << support.project_quota_problem;
  EXPECT_EQ(DiskStatus(support, WorkspaceKind::kPersistent).mechanism, "project_quota");

  const std::string ws = state + "/w";
  ASSERT_EQ(::mkdir(ws.c_str(), 0700), 0);
  const DiskLimits limits{2 << 20, 20};
  auto bound = BoundWorkspace(support, ws, WorkspaceKind::kPersistent, limits);
  ASSERT_TRUE(bound) << bound.error().message();
  EXPECT_EQ(*bound, "project_quota");
  EXPECT_TRUE(WorkspaceDiskStatus(support, ws, limits, false).enforceable);
  // Root without a user namespace writes past an ext4 quota: not claimed.
  EXPECT_FALSE(WorkspaceDiskStatus(support, ws, limits, true).enforceable);
  struct statfs fs {};
  ASSERT_EQ(::statfs(ws.c_str(), &fs), 0);
  EXPECT_LE(static_cast<uint64_t>(fs.f_blocks) * fs.f_bsize, uint64_t{2} << 20) << "df shows it";

  // A writer without CAP_SYS_RESOURCE (as a sandbox is) meets EDQUOT.
  ASSERT_EQ(::chown(ws.c_str(), 65534, 65534), 0);
  for (const std::string& d : {dir.path(), state}) {
    ASSERT_EQ(::chmod(d.c_str(), 0711), 0);  // the writer passes through
  }
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) _exit(90);
    auto [err, written] = Fill(ws + "/big", 64 << 20);
    if (written > (2 << 20)) _exit(91);
    ::unlink((ws + "/big").c_str());
    auto [ierr, files] = Touch(ws, 100);
    if (files >= 20) _exit(92);
    if (err == EDQUOT && ierr == EDQUOT) _exit(0);
    std::fprintf(stderr, "writes: %s, files: %s\n", strerror(err), strerror(ierr));
    _exit(93);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  // The daemon (root) uploading through the files API is bound as well.
  for (const auto& e : std::filesystem::directory_iterator(ws)) std::filesystem::remove(e.path());
  auto fd = sys::Open(ws, O_PATH | O_DIRECTORY);
  ASSERT_TRUE(fd);
  auto put = session::PutFile(fd->get(), session::PutRequest{"big", {}, {}, 64 << 20},
                              std::string(4 << 20, 'q'));
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind, session::Error::Kind::kTooLarge) << put.error().message;
  fd->reset();  // a directory still open stays charged to its project

  struct fsxattr fsx {};
  {
    auto d = sys::Open(ws, O_RDONLY | O_DIRECTORY);
    ASSERT_TRUE(d);
    ASSERT_EQ(::ioctl(d->get(), FS_IOC_FSGETXATTR, &fsx), 0);
  }
  ASSERT_TRUE(RemoveBoundWorkspace(ws));
  // Nothing is charged to the project any more, and it has no limits.
  auto root = sys::Open(state, O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(root);
  struct if_dqblk q {};
  ASSERT_EQ(::syscall(443, root->get(), QCMD(Q_GETQUOTA, PRJQUOTA), fsx.fsx_projid, &q), 0);
  EXPECT_EQ(q.dqb_curinodes, 0u);
  EXPECT_EQ(q.dqb_bhardlimit, 0u);
}

}  // namespace
}  // namespace cordon::contain
