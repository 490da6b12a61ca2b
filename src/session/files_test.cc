#include "session/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "closure/sha256.h"
#include "support.h"
#include "sys/fd.h"

namespace cordon::session {
namespace {

using Kind = Error::Kind;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::mkdir((dir_ / "ws").c_str(), 0700);
    ws_ = *sys::Open(dir_ / "ws", O_PATH | O_DIRECTORY);
  }
  Outcome<FileInfo> Put(const std::string& path, const std::string& body,
                        std::optional<uint64_t> offset = std::nullopt,
                        std::optional<std::string> sha = std::nullopt) {
    return PutFile(ws_.get(), PutRequest{path, offset, sha, 1 << 20}, body);
  }
  testing::TempDir dir_;
  sys::UniqueFd ws_;
};

TEST_F(FilesTest, PathsMustBeRelativeAndPlain) {
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a/"}) {
    auto e = CheckRelativePath(bad, "path");
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->kind, Kind::kInvalid);
    EXPECT_EQ(e->field, "path");
  }
  EXPECT_FALSE(CheckRelativePath("a/b.c/..d", "path"));
  EXPECT_TRUE(CheckRelativePath(std::string("a\0b", 3), "path"));
}

TEST_F(FilesTest, WholeAndChunkedUploadsWithDigests) {
  ASSERT_TRUE(Put("a/b/c.txt", "hello"));
  EXPECT_EQ(testing::Slurp(dir_ / "ws/a/b/c.txt"), "hello");
  auto appended = Put("a/b/c.txt", " world", 5, *closure::Sha256Hex("hello world"));
  ASSERT_TRUE(appended) << appended.error().message;
  EXPECT_EQ(appended->size, 11u);
  auto got = GetFile(ws_.get(), "a/b/c.txt", true, 1 << 20);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "hello world");
  EXPECT_EQ(got->info.sha256, *closure::Sha256Hex("hello world"));
  auto wrong_offset = Put("a/b/c.txt", "x", 3);
  ASSERT_FALSE(wrong_offset);
  EXPECT_EQ(wrong_offset.error().kind, Kind::kConflict);
  auto too_big = Put("big", std::string((1 << 20) + 1, 'x'));
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().kind, Kind::kTooLarge);
}

// A workspace given to a sandbox's outside uid (a kernel that cannot
// idmap it): what an upload makes, its directories and a replaced file (a
// new file renamed over the old) too, is that uid's, so that the sandbox
// can change it.
TEST_F(FilesTest, WhatAnUploadMakesBelongsToTheWorkspacesOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving files to another uid needs root";
  ASSERT_TRUE(Put("kept.txt", "root's"));
  ASSERT_EQ(::chown((dir_ / "ws").c_str(), 1000000000, 1000000001), 0);
  ASSERT_TRUE(Put("new/dir/up.txt", "theirs"));
  ASSERT_TRUE(Put("kept.txt", "replaced"));
  for (const char* made : {"new", "new/dir", "new/dir/up.txt", "kept.txt"}) {
    struct stat st {};
    ASSERT_EQ(::stat((dir_ / "ws/" + made).c_str(), &st), 0) << made;
    EXPECT_EQ(st.st_uid, 1000000000u) << made;
    EXPECT_EQ(st.st_gid, 1000000001u) << made;
  }
  // The daemon's own workspace: nothing is given away.
  ASSERT_EQ(::chown((dir_ / "ws").c_str(), 0, 0), 0);
  ASSERT_TRUE(Put("mine/up.txt", "root's"));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "ws/mine/up.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST_F(FilesTest, AMismatchLeavesNothingBehind) {
  std::string wrong = *closure::Sha256Hex("other");
  auto whole = Put("w.txt", "content", std::nullopt, wrong);
  ASSERT_FALSE(whole);
  EXPECT_EQ(whole.error().kind, Kind::kIntegrity);
  EXPECT_NE(::access((dir_ / "ws/w.txt").c_str(), F_OK), 0);
  ASSERT_TRUE(Put("c.txt", "abc"));
  auto chunk = Put("c.txt", "def", 3, wrong);
  ASSERT_FALSE(chunk);
  EXPECT_NE(::access((dir_ / "ws/c.txt").c_str(), F_OK), 0);
  auto listing = ListFiles(ws_.get(), "");
  ASSERT_TRUE(listing);
  EXPECT_TRUE(listing->empty()) << *listing;
}

TEST_F(FilesTest, SymlinksThatLeaveAreRefusedAndThoseInsideFollowed) {
  ASSERT_EQ(::symlink("/etc", (dir_ / "ws/etc").c_str()), 0);
  ASSERT_EQ(::symlink("..", (dir_ / "ws/up").c_str()), 0);
  ASSERT_EQ(::symlink("/proc/self/root", (dir_ / "ws/magic").c_str()), 0);
  ASSERT_TRUE(Put("real/f", "inside"));
  ASSERT_EQ(::symlink("real", (dir_ / "ws/alias").c_str()), 0);
  for (const char* path : {"etc/passwd", "up/outside", "magic/etc/passwd"}) {
    auto got = GetFile(ws_.get(), path, true, 1 << 20);
    ASSERT_FALSE(got) << path;
    EXPECT_EQ(got.error().kind, Kind::kForbidden) << path << ": " << got.error().message;
  }
  auto put = Put("up/outside", "x");
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind, Kind::kForbidden);
  EXPECT_NE(::access((dir_ / "outside").c_str(), F_OK), 0);
  auto inside = GetFile(ws_.get(), "alias/f", true, 1 << 20);
  ASSERT_TRUE(inside);
  EXPECT_EQ(inside->body, "inside");
  // Deleting a link removes the link, never its target.
  ASSERT_TRUE(DeleteFile(ws_.get(), "etc"));
  EXPECT_EQ(::access("/etc/passwd", F_OK), 0);
}

TEST_F(FilesTest, AFifoIsNotReadAndDirectoriesAreListed) {
  ASSERT_EQ(::mkfifo((dir_ / "ws/pipe").c_str(), 0600), 0);
  auto got = GetFile(ws_.get(), "pipe", true, 1 << 20);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().kind, Kind::kConflict);
  ASSERT_TRUE(Put("d/x", "1"));
  auto listing = ListFiles(ws_.get(), ".");
  ASSERT_TRUE(listing);
  ASSERT_EQ(listing->size(), 2u);
  EXPECT_EQ((*listing)[0]["name"], "d");
  EXPECT_EQ((*listing)[0]["type"], "directory");
  EXPECT_EQ((*listing)[1]["type"], "other");
  auto not_empty = DeleteFile(ws_.get(), "d");
  ASSERT_FALSE(not_empty);
  EXPECT_EQ(not_empty.error().kind, Kind::kConflict);
}

// Special files are never opened (a FIFO would block, a socket refuses with
// ENXIO, a device's driver would run): each is a 409 for a download, a HEAD
// and an appended chunk, and a write-only FIFO nobody reads stays unopened.
TEST_F(FilesTest, SpecialFilesAreRefusedWithoutBeingOpened) {
  ASSERT_EQ(::mkfifo((dir_ / "ws/fifo").c_str(), 0600), 0);
  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string sock_path = dir_ / "ws/sock";
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  // A device node where the host allows one (root); /dev/zero would never end.
  bool device = ::mknod((dir_ / "ws/zero").c_str(), S_IFCHR | 0600, ::makedev(1, 5)) == 0;
  std::vector<std::string> names = {"fifo", "sock"};
  if (device) names.push_back("zero");
  for (const std::string& name : names) {
    for (bool body : {true, false}) {
      auto got = GetFile(ws_.get(), name, body, 1 << 20);
      ASSERT_FALSE(got) << name;
      EXPECT_EQ(got.error().kind, Kind::kConflict) << name << ": " << got.error().message;
    }
    auto chunk = Put(name, "x", 0u + 1);
    ASSERT_FALSE(chunk) << name;
    EXPECT_EQ(chunk.error().kind, Kind::kConflict) << name << ": " << chunk.error().message;
  }
  ::close(sock);
}

}  // namespace
}  // namespace cordon::session
