// Pinned closures, attestation and identity signals through the CLI.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "cordon_cli.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& content, fs::perms mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
  fs::permissions(path, mode);
}

constexpr fs::perms kReadExec = fs::perms::owner_read | fs::perms::owner_exec |
                                fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec;

// A closure with a copy of /bin/echo, a script, and a worker (the retitle
// helper) its launcher script starts; manifest and pin made by the CLI.
class ClosureCliTest : public CliTest {
 protected:
  void SetUp() override {
    // A closure is installed readable by everyone (the sandbox's root is an
    // unprivileged id outside); mkdtemp made the test's directory 0700.
    fs::permissions(work_.path(), kReadExec | fs::perms::owner_write);
    dir_ = work_ / "closure";
    fs::create_directories(dir_ + "/bin");
    fs::copy_file("/bin/echo", dir_ + "/bin/echo");
    fs::permissions(dir_ + "/bin/echo", kReadExec);
    WriteFile(dir_ + "/bin/hello.sh", "#!/bin/sh\necho \"hello $1\"\n", kReadExec);
    fs::copy_file(Helper("retitle"), dir_ + "/bin/worker");
    fs::permissions(dir_ + "/bin/worker", kReadExec);
    WriteFile(dir_ + "/bin/launch.sh",
              "#!/bin/sh\n" + dir_ + "/bin/worker worker-7 padding-padding-padding & wait\n",
              kReadExec);
    Ran made = Admin({"closure", "make", dir_});
    ASSERT_EQ(made.status, 0) << made.err;
    manifest_ = dir_ + "/.cordon/manifest.json";
    WriteFile(manifest_, made.out,
              fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    Ran pin = Admin({"closure", "pin", manifest_});
    ASSERT_EQ(pin.status, 0) << pin.err;
    pin_ = pin.out.substr(0, 64);
    ASSERT_EQ(pin.out, pin_ + "\n");
  }
  // `cordon closure ...` takes no --state-dir: call it without Admin's.
  Ran Admin(std::vector<std::string> args) { return Cordon(args).Wait(); }
  std::vector<std::string> Closure(std::vector<std::string> rest) {
    std::vector<std::string> a = {"--closure", dir_, "--pin", pin_, "--"};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  }
  std::string dir_, manifest_, pin_;
};

TEST_F(ClosureCliTest, RunsAVerifiedBinaryAndScript) {
  Ran echo = Run(Closure({"bin/echo", "from", "the", "closure"}));
  EXPECT_EQ(echo.status, 0) << echo.err;
  EXPECT_EQ(echo.out, "from the closure\n");
  Ran script = Run(Closure({"bin/hello.sh", "world"}));
  EXPECT_EQ(script.status, 0) << script.err;
  EXPECT_EQ(script.out, "hello world\n");
}

TEST_F(ClosureCliTest, ALauncherLinkRunsOnlyIfItResolvesIntoTheClosure) {
  std::string link = work_ / "hello";
  fs::create_symlink(dir_ + "/bin/hello.sh", link);
  Ran ok = Run(Closure({link, "linked"}));
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.out, "hello linked\n");
  fs::remove(link);
  fs::create_symlink("/bin/echo", link);  // retargeted to a file outside
  Ran refused = Run(Closure({link, "x"}));
  EXPECT_EQ(refused.status, 125);
  EXPECT_NE(refused.err.find("not_in_closure"), std::string::npos) << refused.err;
  EXPECT_EQ(refused.out, "");
}

TEST_F(ClosureCliTest, AWrongPinOrATamperedFileRunsNothing) {
  std::string marker = work_ / "ran";
  std::string wrong(64, '0');
  Ran bad_pin = Run({"--closure", dir_, "--pin", wrong, "--", "bin/echo", "x"});
  EXPECT_EQ(bad_pin.status, 125);
  EXPECT_NE(bad_pin.err.find("closure_pin"), std::string::npos) << bad_pin.err;
  // Tamper with the script: same size, other bytes...
  fs::permissions(dir_ + "/bin/hello.sh", fs::perms::owner_write, fs::perm_options::add);
  WriteFile(dir_ + "/bin/hello.sh", "#!/bin/sh\necho \"HELLO $1\"\n", kReadExec);
  Ran tampered = Run(Closure({"bin/hello.sh"}));
  EXPECT_EQ(tampered.status, 125);
  EXPECT_NE(tampered.err.find("digest_mismatch"), std::string::npos) << tampered.err;
  EXPECT_EQ(tampered.out, "");
  // ...or other bytes altogether.
  fs::permissions(dir_ + "/bin/hello.sh", fs::perms::owner_write, fs::perm_options::add);
  WriteFile(dir_ + "/bin/hello.sh", "#!/bin/sh\ntouch " + marker + "\n", kReadExec);
  Ran replaced = Run(Closure({"bin/hello.sh"}));
  EXPECT_EQ(replaced.status, 125);
  EXPECT_NE(replaced.err.find("size_mismatch"), std::string::npos) << replaced.err;
  EXPECT_FALSE(fs::exists(marker));
  Ran missing_pin = Run({"--closure", dir_, "--", "bin/echo"});
  EXPECT_EQ(missing_pin.status, 125);
  EXPECT_NE(missing_pin.err.find("--pin"), std::string::npos);
}

TEST_F(ClosureCliTest, AttestsTheWorkerOfARunningClosureAndSignalsItByIdentity) {
  Cordon run(RunArgs(Closure({"bin/launch.sh"})));
  // The worker prints "ready" once it has rewritten its title.
  ASSERT_TRUE(WaitForOutput(run, "ready"));
  Ran grants = CliTest::Admin({"grants", "--json"});
  json active = json::parse(grants.out);
  ASSERT_EQ(active.size(), 1u);
  std::string root = active[0]["identity"].dump();

  Ran chain = Cordon({"attest", "--root-identity", root, "--closure", dir_, "--pin", pin_,
                      "--expect-title", "worker-7", "--json"})
                  .Wait();
  ASSERT_EQ(chain.status, 0) << chain.err;
  json ids = json::parse(chain.out);
  // The worker, the launcher script's shell, then the root: the grant's
  // main process (the sandbox's init under isolation).
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.back(), active[0]["identity"]);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(ids[i]["ppid"], ids[i + 1]["pid"]);

  // The launcher read its script through /dev/fd/N: without the closure to
  // show that descriptor is pinned, the chain is refused.
  Ran unpinned = Cordon({"attest", "--root-identity", root, "--expect-title", "worker-7"}).Wait();
  EXPECT_EQ(unpinned.status, 1);
  EXPECT_NE(unpinned.err.find("fd_exec_unpinned"), std::string::npos) << unpinned.err;

  // A stale identity is never signalled; the exact one is.
  json stale = ids[0];
  stale["start_ticks"] = stale["start_ticks"].get<uint64_t>() - 1;
  Ran refused = Cordon({"signal", "--identity", stale.dump(), "KILL"}).Wait();
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("pid_reused"), std::string::npos);
  pid_t worker = ids[0]["pid"].get<pid_t>();
  EXPECT_FALSE(Exited(worker));
  Ran sent = Cordon({"signal", "--identity", ids[0].dump(), "SIGTERM"}).Wait();
  EXPECT_EQ(sent.status, 0) << sent.err;
  // The launcher's wait returns, the run ends by itself.
  Ran ended = run.Wait();
  EXPECT_EQ(ended.status, 0) << ended.err;
  EXPECT_TRUE(Exited(worker));
  Ran again = Cordon({"signal", "--identity", ids[0].dump(), "TERM"}).Wait();
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("gone"), std::string::npos);
}

TEST_F(ClosureCliTest, BadInputToAttestAndSignal) {
  EXPECT_EQ(Cordon({"attest", "--root-identity", "{}"}).Wait().status, 125);
  EXPECT_EQ(Cordon({"signal", "--identity", "nope", "TERM"}).Wait().status, 125);
  Ran bad_sig = Cordon({"signal", "--identity",
                        R"({"pid":1,"ppid":0,"start_ticks":1,"boot_id":"x"})", "SIGWHAT"})
                    .Wait();
  EXPECT_EQ(bad_sig.status, 125);
  EXPECT_NE(bad_sig.err.find("SIGWHAT"), std::string::npos);
}

}  // namespace
}  // namespace cordon::testing
