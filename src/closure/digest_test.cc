#include "closure/digest.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "closure/sha256.h"
#include "closure/test_tree.h"
#include "sys/fd.h"

namespace cordon::closure {
namespace {

struct OpenFile {
  sys::UniqueFd fd;
  struct stat st;
};

OpenFile OpenForTest(const std::string& path) {
  auto fd = sys::Open(path, O_RDONLY);
  EXPECT_TRUE(fd) << fd.error().message();
  OpenFile f{std::move(*fd), {}};
  EXPECT_EQ(::fstat(f.fd.get(), &f.st), 0);
  return f;
}

TEST(ClosureDigestTest, HashesAFileLargerThanOneChunk) {
  TestTree tree;
  std::string content;
  for (int i = 0; i < 300000; ++i) content += static_cast<char>('a' + i % 26);
  tree.Write("big", content);
  OpenFile f = OpenForTest(tree / "big");
  auto digest = DigestFile(f.fd.get(), f.st, "big");
  ASSERT_TRUE(digest) << digest.error().message;
  EXPECT_EQ(digest->sha256, Sha256Hex(content).value());
  EXPECT_EQ(digest->size, content.size());
  // pread: the fd's offset is where it was, for whoever uses it next.
  EXPECT_EQ(::lseek(f.fd.get(), 0, SEEK_CUR), 0);
}

TEST(ClosureDigestTest, AGrowingFileChangedWhileReading) {
  TestTree tree;
  tree.Write("f", "original");
  OpenFile f = OpenForTest(tree / "f");
  auto digest = DigestFile(f.fd.get(), f.st, "f", [&] {
    // Root ignores the missing w bit; the mode is not what protects here.
    std::ofstream(tree / "f", std::ios::app) << " and more";
  });
  ASSERT_FALSE(digest);
  EXPECT_EQ(digest.error().rule, Rule::kChangedWhileReading);
  EXPECT_EQ(digest.error().path, "f");
}

TEST(ClosureDigestTest, ATouchedFileChangedWhileReading) {
  TestTree tree;
  tree.Write("f", "same bytes");
  OpenFile f = OpenForTest(tree / "f");
  auto digest = DigestFile(f.fd.get(), f.st, "f", [&] {
    const struct timespec times[2] = {{1000, 0}, {1000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, (tree / "f").c_str(), times, 0), 0);
  });
  ASSERT_FALSE(digest);
  EXPECT_EQ(digest.error().rule, Rule::kChangedWhileReading);
}

TEST(ClosureDigestTest, ADifferentInodeChangedWhileReading) {
  TestTree tree;
  tree.Write("f", "one");
  tree.Write("g", "two");
  OpenFile f = OpenForTest(tree / "f");
  OpenFile g = OpenForTest(tree / "g");
  // The stat of one file and the fd of another: what a swap between the
  // look and the read would produce.
  auto digest = DigestFile(g.fd.get(), f.st, "f");
  ASSERT_FALSE(digest);
  EXPECT_EQ(digest.error().rule, Rule::kChangedWhileReading);
}

}  // namespace
}  // namespace cordon::closure
