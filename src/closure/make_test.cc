#include "closure/make.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "closure/sha256.h"
#include "closure/test_tree.h"
#include "closure/verify.h"
#include "sys/json_text.h"

namespace cordon::closure {
namespace {

std::vector<std::pair<std::string, std::string>> Problems(const MadeManifest& made) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : made.problems) out.emplace_back(RuleName(f.rule), f.path);
  return out;
}

TEST(ClosureMakeTest, ListsEveryRegularFileSorted) {
  TestTree tree;
  tree.Write("b", "bee", 0444);
  tree.Write("a-b", "", 0444);
  tree.Write("a/z", "zed", 0555);
  tree.Write("\u00fc/x", "umlaut", 0644);
  auto made = MakeManifest(tree.root());
  ASSERT_TRUE(made) << made.error().message();
  EXPECT_TRUE(made->ok());
  const std::vector<Entry> expected = {
      {"a-b", Sha256Hex("").value(), 0, false},
      {"a/z", Sha256Hex("zed").value(), 3, true},
      {"b", Sha256Hex("bee").value(), 3, false},
      {"\u00fc/x", Sha256Hex("umlaut").value(), 6, false},
  };
  EXPECT_EQ(made->manifest.entries, expected);
  EXPECT_EQ(made->writable, std::vector<std::string>{"\u00fc/x"});
}

TEST(ClosureMakeTest, WhatItMakesParsesAndVerifies) {
  TestTree tree;
  tree.Write("bin/run", "#!/bin/sh\n", 0555);
  tree.Write("share/doc", "doc", 0444);
  auto made = MakeManifest(tree.root());
  ASSERT_TRUE(made && made->ok());
  auto parsed = ParseManifest(sys::JsonText(ToJson(made->manifest), 2));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(*parsed, made->manifest);
  auto v = VerifyClosure(tree.root(), *parsed, Pin(*parsed).value());
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->ok()) << v->failures[0].message;
}

TEST(ClosureMakeTest, ReportsWhatAManifestCannotHold) {
  TestTree tree;
  tree.Write("ok", "fine", 0444);
  std::filesystem::create_symlink("ok", tree / "link");
  ASSERT_EQ(::mkfifo((tree / "fifo").c_str(), 0644), 0);
  tree.Mkdir("hollow/inside");
  tree.Write(".cordon/pin", "x", 0444);
  tree.Write("bad\xff", "x", 0444);
  auto made = MakeManifest(tree.root());
  ASSERT_TRUE(made) << made.error().message();
  EXPECT_FALSE(made->ok());
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"path_reserved", ".cordon/pin"}, {"bad_path", "bad\xff"}, {"not_regular", "fifo"},
      {"empty_directory", "hollow/"},   {"symlink", "link"},
  };
  EXPECT_EQ(Problems(*made), expected);
  ASSERT_EQ(made->manifest.entries.size(), 1u);
  EXPECT_EQ(made->manifest.entries[0].path, "ok");
}

TEST(ClosureMakeTest, AnEmptyDirectoryIsNoClosure) {
  TestTree tree;
  auto made = MakeManifest(tree.root());
  ASSERT_TRUE(made);
  EXPECT_EQ(Problems(*made),
            (std::vector<std::pair<std::string, std::string>>{{"empty_entries", ""}}));
}

TEST(ClosureMakeTest, AMissingDirectoryIsAnError) {
  TestTree tree;
  EXPECT_FALSE(MakeManifest(tree / "nope"));
}

}  // namespace
}  // namespace cordon::closure
