#include "closure/verify.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "closure/make.h"
#include "closure/sha256.h"
#include "closure/test_tree.h"
#include "sys/fd.h"

namespace cordon::closure {
namespace {

const char kTool[] = "#!/bin/sh\necho tool\n";
const char kData[] = "some data\n";

std::vector<std::string> Rules(const Verification& v) {
  std::vector<std::string> rules;
  for (const auto& f : v.failures) rules.emplace_back(RuleName(f.rule));
  return rules;
}

// A closure of two files, its manifest made from disk, and its pin.
class ClosureVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tree_.Write("bin/tool", kTool, 0555);
    tree_.Write("lib/data.txt", kData, 0444);
    auto made = MakeManifest(tree_.root());
    ASSERT_TRUE(made) << made.error().message();
    ASSERT_TRUE(made->ok());
    manifest_ = made->manifest;
    pin_ = Pin(manifest_).value();
  }

  Verification Verify(const VerifyOptions& options = {}) {
    auto v = VerifyClosure(tree_.root(), manifest_, pin_, options);
    EXPECT_TRUE(v) << v.error().message();
    return v ? std::move(*v) : Verification{};
  }

  // Verification fails with exactly `rule` for `path`, and hands out no fd.
  void ExpectFailure(const std::string& rule, const std::string& path) {
    Verification v = Verify();
    EXPECT_FALSE(v.ok());
    EXPECT_EQ(Rules(v), std::vector<std::string>{rule});
    if (!v.failures.empty()) {
      EXPECT_EQ(v.failures[0].path, path);
      EXPECT_NE(v.failures[0].message.find(path), std::string::npos) << v.failures[0].message;
    }
    EXPECT_TRUE(v.files.empty());
  }

  TestTree tree_;
  Manifest manifest_;
  std::string pin_;
};

TEST_F(ClosureVerifyTest, AnIntactClosureVerifiesAndKeepsItsFds) {
  Verification v = Verify();
  ASSERT_TRUE(v.ok()) << v.failures[0].message;
  EXPECT_TRUE(v.unlisted.empty());
  ASSERT_EQ(v.files.size(), 2u);
  EXPECT_EQ(v.files[0].path, "bin/tool");
  EXPECT_EQ(v.files[1].path, "lib/data.txt");

  // The fd is the verified inode, open for reading, blocking, at offset 0.
  int fd = v.FdFor("bin/tool");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(v.FdFor("nope"), -1);
  struct stat by_fd, by_name;
  ASSERT_EQ(::fstat(fd, &by_fd), 0);
  ASSERT_EQ(::stat((tree_ / "bin/tool").c_str(), &by_name), 0);
  EXPECT_EQ(by_fd.st_ino, by_name.st_ino);
  int flags = ::fcntl(fd, F_GETFL);
  EXPECT_EQ(flags & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(flags & O_NONBLOCK, 0);
  EXPECT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(sys::ReadAll(fd).value(), kTool);
}

TEST_F(ClosureVerifyTest, ASymlinkedFileFails) {
  // Even a link to identical bytes fails: what it points to can change.
  TestTree outside;
  outside.Write("data.txt", kData, 0444);
  std::filesystem::remove(tree_ / "lib/data.txt");
  std::filesystem::create_symlink(outside / "data.txt", tree_ / "lib/data.txt");
  ExpectFailure("symlink", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, ASymlinkedDirectoryFails) {
  tree_.Write("real/data.txt", kData, 0444);
  std::filesystem::remove_all(tree_ / "lib");
  std::filesystem::create_symlink("real", tree_ / "lib");
  Verification v = Verify();
  EXPECT_FALSE(v.ok());
  ASSERT_FALSE(v.failures.empty());
  EXPECT_EQ(RuleName(v.failures[0].rule), "symlink");
  EXPECT_EQ(v.failures[0].path, "lib/data.txt");
  // And the link and the directory it points to are not listed either.
  EXPECT_EQ(v.unlisted, (std::vector<std::string>{"lib", "real/"}));
}

TEST_F(ClosureVerifyTest, AWritableFileFailsEvenForRoot) {
  ::chmod((tree_ / "lib/data.txt").c_str(), 0644);
  ExpectFailure("writable", "lib/data.txt");
  ::chmod((tree_ / "lib/data.txt").c_str(), 0442);  // writable by others only
  ExpectFailure("writable", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, AWrongDigestFails) {
  tree_.Write("lib/data.txt", "SOME DATA\n", 0444);  // same size
  ExpectFailure("digest_mismatch", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, AWrongSizeFails) {
  tree_.Write("lib/data.txt", "more data than before\n", 0444);
  ExpectFailure("size_mismatch", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, AWrongExecutableBitFails) {
  ::chmod((tree_ / "bin/tool").c_str(), 0444);
  ExpectFailure("executable_mismatch", "bin/tool");
  ::chmod((tree_ / "lib/data.txt").c_str(), 0544);
  ::chmod((tree_ / "bin/tool").c_str(), 0555);
  ExpectFailure("executable_mismatch", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, EveryFailureOfAnEntryIsReported) {
  tree_.Write("lib/data.txt", "SOME DATA\n", 0755);
  Verification v = Verify();
  EXPECT_EQ(Rules(v),
            (std::vector<std::string>{"writable", "executable_mismatch", "digest_mismatch"}));
}

TEST_F(ClosureVerifyTest, AFileReplacedAfterMakeFails) {
  struct stat before;
  ASSERT_EQ(::stat((tree_ / "lib/data.txt").c_str(), &before), 0);
  tree_.Write("lib/data.new", "replaced!\n", 0444);  // same size, another inode
  std::filesystem::rename(tree_ / "lib/data.new", tree_ / "lib/data.txt");
  struct stat after;
  ASSERT_EQ(::stat((tree_ / "lib/data.txt").c_str(), &after), 0);
  ASSERT_NE(before.st_ino, after.st_ino);
  ExpectFailure("digest_mismatch", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, AMissingFileFails) {
  std::filesystem::remove(tree_ / "lib/data.txt");
  ExpectFailure("missing", "lib/data.txt");
}

TEST_F(ClosureVerifyTest, AFileWhereADirectoryShouldBeFails) {
  std::filesystem::remove_all(tree_ / "lib");
  tree_.Write("lib", "not a directory", 0444);
  Verification v = Verify();
  ASSERT_FALSE(v.failures.empty());
  EXPECT_EQ(RuleName(v.failures[0].rule), "missing");
  EXPECT_EQ(v.failures[0].path, "lib/data.txt");
}

TEST_F(ClosureVerifyTest, AFifoOrADirectoryIsNotRegular) {
  std::filesystem::remove(tree_ / "lib/data.txt");
  ASSERT_EQ(::mkfifo((tree_ / "lib/data.txt").c_str(), 0444), 0);
  ExpectFailure("not_regular", "lib/data.txt");  // and does not hang opening it
  std::filesystem::remove(tree_ / "lib/data.txt");
  tree_.Write("lib/data.txt/inner", kData);
  ExpectFailure("not_regular", "lib/data.txt");  // its contents are not also "unlisted"
}

TEST_F(ClosureVerifyTest, UnlistedFilesAreReportedAndFailUnlessAllowed) {
  tree_.Write("lib/extra.txt", "extra", 0444);
  tree_.Write("junk/deep/file", "x", 0444);
  tree_.Mkdir("empty");
  std::filesystem::create_symlink("bin/tool", tree_ / "link");
  const std::vector<std::string> unlisted = {"empty/", "junk/", "lib/extra.txt", "link"};

  Verification v = Verify();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.unlisted, unlisted);
  EXPECT_EQ(Rules(v), std::vector<std::string>(4, "unlisted"));
  EXPECT_TRUE(v.files.empty());

  Verification allowed = Verify(VerifyOptions{.allow_unlisted = true});
  EXPECT_TRUE(allowed.ok());
  EXPECT_EQ(allowed.unlisted, unlisted);
  EXPECT_EQ(allowed.files.size(), 2u);
}

TEST_F(ClosureVerifyTest, AWrongPinIsTheOnlyFailure) {
  tree_.Write("lib/data.txt", "changed", 0644);
  auto v = VerifyClosure(tree_.root(), manifest_, std::string(64, '0'));
  ASSERT_TRUE(v);
  EXPECT_EQ(Rules(*v), std::vector<std::string>{"closure_pin"});
  EXPECT_TRUE(v->files.empty());
}

TEST_F(ClosureVerifyTest, AnUnopenableDirectoryIsAnError) {
  EXPECT_FALSE(VerifyClosure(tree_ / "does-not-exist", manifest_, pin_));
  EXPECT_FALSE(VerifyClosure(tree_ / "bin/tool", manifest_, pin_));
}

TEST_F(ClosureVerifyTest, VerifyEntryKeepsOneFd) {
  auto root = sys::Open(tree_.root(), O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(root);
  auto fd = VerifyEntry(root->get(), manifest_.entries[1]);
  ASSERT_TRUE(fd);
  EXPECT_EQ(sys::ReadAll(fd->get()).value(), kData);
  Entry wrong = manifest_.entries[1];
  wrong.sha256 = std::string(64, 'f');
  auto failed = VerifyEntry(root->get(), wrong);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().size(), 1u);
  EXPECT_EQ(failed.error()[0].rule, Rule::kDigestMismatch);
}

TEST_F(ClosureVerifyTest, JsonHasOkFailuresAndUnlisted) {
  tree_.Write("extra", "x", 0444);
  auto json = ToJson(Verify());
  EXPECT_EQ(json["ok"], false);
  ASSERT_EQ(json["failures"].size(), 1u);
  EXPECT_EQ(json["failures"][0]["rule"], "unlisted");
  EXPECT_EQ(json["failures"][0]["path"], "extra");
  EXPECT_TRUE(json["failures"][0]["message"].is_string());
  EXPECT_EQ(json["unlisted"], nlohmann::json::array({"extra"}));
}

}  // namespace
}  // namespace cordon::closure
