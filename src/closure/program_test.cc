#include "closure/program.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "closure/make.h"
#include "closure/test_tree.h"
#include "sys/json_text.h"

namespace cordon::closure {
namespace {

// A closure with a binary-like file and a script, made, pinned and verified,
// with its manifest kept where `cordon run --closure` looks for it.
struct Pinned {
  TestTree tree;
  std::string pin;
  std::optional<Verification> verified;

  Pinned() {
    tree.Write("bin/tool",
               "\x7f"
               "ELF pretend",
               0555);
    tree.Write("bin/launch.sh", "#!/bin/sh\necho hi\n", 0555);
    auto made = MakeManifest(tree.root());
    EXPECT_TRUE(made && made->ok());
    pin = Pin(made->manifest).value();
    tree.Write(std::string(kManifestPath), sys::JsonText(ToJson(made->manifest)), 0444);
    Reverify();
  }
  void Reverify() {
    auto text = ReadManifestText(tree / std::string(kManifestPath));
    auto manifest = ParseManifest(*text);
    EXPECT_TRUE(manifest);
    auto v = VerifyClosure(tree.root(), *manifest, pin);
    EXPECT_TRUE(v && v->ok()) << (v && !v->ok() ? v->failures[0].message : "");
    verified = std::move(*v);
  }
};

TEST(ResolveProgramTest, TheManifestInsideTheClosureIsNotPartOfIt) {
  Pinned p;
  EXPECT_EQ(p.verified->files.size(), 2u);
  EXPECT_TRUE(p.verified->unlisted.empty());
  // Anything else under .cordon/ is an unlisted file like any other.
  p.tree.Write(".cordon/extra", "x", 0444);
  auto manifest = ParseManifest(*ReadManifestText(p.tree / std::string(kManifestPath)));
  auto v = VerifyClosure(p.tree.root(), *manifest, p.pin);
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->ok());
  EXPECT_EQ(v->unlisted, std::vector<std::string>{".cordon/extra"});
}

TEST(ResolveProgramTest, ARelativePathNamesTheEntry) {
  Pinned p;
  auto prog = ResolveProgram(*p.verified, p.tree.root(), "bin/tool");
  ASSERT_TRUE(prog) << prog.error().message;
  EXPECT_EQ(prog->path, "bin/tool");
  EXPECT_EQ(prog->fd, p.verified->FdFor("bin/tool"));
  EXPECT_FALSE(prog->script);
  auto script = ResolveProgram(*p.verified, p.tree.root(), "bin/launch.sh");
  ASSERT_TRUE(script);
  EXPECT_TRUE(script->script);
}

TEST(ResolveProgramTest, ALauncherLinkMustResolveIntoTheClosure) {
  Pinned p;
  testing::TempDir elsewhere;
  std::string link = elsewhere / "tool";
  std::filesystem::create_symlink(p.tree / "bin/tool", link);
  auto prog = ResolveProgram(*p.verified, p.tree.root(), link);
  ASSERT_TRUE(prog) << prog.error().message;
  EXPECT_EQ(prog->path, "bin/tool");

  // Retargeted after the check, to a look-alike outside: caught.
  std::string impostor = elsewhere / "impostor";
  {
    std::FILE* f = std::fopen(impostor.c_str(), "w");
    std::fputs(
        "\x7f"
        "ELF pretend",
        f);
    std::fclose(f);
  }
  std::filesystem::remove(link);
  std::filesystem::create_symlink(impostor, link);
  auto refused = ResolveProgram(*p.verified, p.tree.root(), link);
  ASSERT_FALSE(refused);
  EXPECT_EQ(RuleName(refused.error().rule), "not_in_closure");
}

TEST(ResolveProgramTest, AFileSwappedAfterVerificationIsNotRun) {
  Pinned p;
  // Same name, same content, new inode: not the file that was verified.
  std::string path = p.tree / "bin/tool";
  std::string swapped = p.tree / "bin/tool.new";
  std::filesystem::copy_file(path, swapped);
  std::filesystem::rename(swapped, path);
  auto refused = ResolveProgram(*p.verified, p.tree.root(), "bin/tool");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().rule, Rule::kNotInClosure);
  // The verified descriptor still holds the original inode.
  EXPECT_GE(p.verified->FdFor("bin/tool"), 0);
}

TEST(ResolveProgramTest, NothingRunsFromAClosureThatDidNotVerify) {
  Pinned p;
  Verification failed;
  failed.failures.push_back(Failure{Rule::kDigestMismatch, "bin/tool", "x"});
  EXPECT_FALSE(ResolveProgram(failed, p.tree.root(), "bin/tool"));
  EXPECT_FALSE(ResolveProgram(*p.verified, p.tree.root(), "bin/missing"));
}

}  // namespace
}  // namespace cordon::closure
