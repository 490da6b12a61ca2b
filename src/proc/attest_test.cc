#include "proc/attest.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "closure/digest.h"
#include "proc/stat.h"
#include "support.h"
#include "sys/fd.h"

namespace cordon::proc {
namespace {

// A root process (sh) that starts `count` retitling children and waits.
class Family {
 public:
  Family(const std::string& title, int count, const std::string& cwd) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    root_ = ::fork();
    if (root_ == 0) {
      ::dup2(ready[1], 1);
      ::close(ready[0]);
      if (::chdir(cwd.c_str()) != 0) ::_exit(2);
      std::string script;
      for (int i = 0; i < count; ++i) {
        // A long argv[0] leaves room for the new title.
        script += testing::Helper("retitle") + " " + title + " padding-padding-padding & ";
      }
      script += "wait";
      ::execl("/bin/sh", "sh", "-c", script.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(ready[1]);
    char buf[6];
    for (int i = 0; i < count; ++i) EXPECT_EQ(::read(ready[0], buf, 6), 6);  // "ready\n"
    ::close(ready[0]);
    identity_ = ReadIdentity(root_).value();
  }
  ~Family() {
    // The children are the root's; killing the root's group is not ours to
    // do (it is the test's group): kill each by pid.
    for (const auto& [pid, ppid] : Children()) ::kill(pid, SIGKILL);
    ::kill(root_, SIGKILL);
    ::waitpid(root_, nullptr, 0);
  }
  std::vector<std::pair<pid_t, pid_t>> Children() const {
    std::vector<std::pair<pid_t, pid_t>> out;
    std::vector<pid_t> pids = ListPids().value();
    for (pid_t pid : pids) {
      auto st = ReadStat(pid);
      if (st && st->ppid == root_) out.emplace_back(pid, root_);
    }
    return out;
  }
  const Identity& identity() const { return identity_; }

 private:
  pid_t root_;
  Identity identity_;
};

std::string HelperDigest() {
  auto fd = sys::Open(testing::Helper("retitle"), O_RDONLY);
  struct stat st {};
  ::fstat(fd->get(), &st);
  return closure::DigestFile(fd->get(), st, "retitle").value().sha256;
}

TEST(AttestTest, ARetitledProcessIsAttestedThroughItsPinnedParent) {
  testing::TempDir dir;
  Family family("worker-7", 1, dir.path());
  AttestExpectations expect;
  expect.title = "worker-7";
  expect.exe_sha256 = HelperDigest();
  expect.cwd = dir.path();
  auto chain = Attest(family.identity(), expect);
  ASSERT_TRUE(chain) << chain.error().reason << ": " << chain.error().message;
  ASSERT_EQ(chain->size(), 2u);
  EXPECT_EQ(chain->back(), family.identity());
  EXPECT_EQ((*chain)[0].ppid, family.identity().pid);
  EXPECT_EQ(ReadArgv((*chain)[0].pid).at(0), "worker-7");
}

TEST(AttestTest, EachRejectionHasItsReason) {
  testing::TempDir dir;
  Family family("worker-7", 1, dir.path());
  auto reason = [&](const Identity& root, AttestExpectations e) {
    auto r = Attest(root, e);
    return r ? std::string("accepted") : r.error().reason;
  };
  AttestExpectations title;
  title.title = "worker-7";

  Identity changed = family.identity();
  changed.start_ticks += 1;
  EXPECT_EQ(reason(changed, title), "root_changed");

  AttestExpectations nobody;
  nobody.title = "no-such-title";
  EXPECT_EQ(reason(family.identity(), nobody), "no_matching_child");

  AttestExpectations digest = title;
  digest.exe_sha256 = std::string(64, '0');
  EXPECT_EQ(reason(family.identity(), digest), "snapshot_digest");

  AttestExpectations cwd = title;
  cwd.cwd = "/nonexistent";
  EXPECT_EQ(reason(family.identity(), cwd), "wrong_cwd");

  AttestExpectations outsider;
  outsider.target = ReadIdentity(::getpid()).value();  // the test is not below the root
  EXPECT_EQ(reason(family.identity(), outsider), "not_descendant");

  EXPECT_EQ(reason(family.identity(), title), "accepted");
}

TEST(AttestTest, TwoMatchingChildrenAreAmbiguous) {
  testing::TempDir dir;
  Family family("twin", 2, dir.path());
  AttestExpectations e;
  e.title = "twin";
  auto r = Attest(family.identity(), e);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "ambiguous_child");
  // Naming one of them as the target settles it.
  e.target = ReadIdentity(family.Children().at(0).first).value();
  EXPECT_TRUE(Attest(family.identity(), e));
}

TEST(AttestTest, AProcessLaunchedThroughADescriptorNeedsAPinnedClosure) {
  // sh reading its script from /dev/fd/N, as the kernel runs a "#!" file
  // executed by descriptor.
  testing::TempDir dir;
  std::string script = dir / "script.sh";
  {
    auto fd = sys::Open(script, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_TRUE(sys::WriteAll(fd->get(), std::string("sleep 60\n")));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(script.c_str(), O_RDONLY);  // not close-on-exec: sh reads it
    std::string path = "/dev/fd/" + std::to_string(fd);
    ::execl("/bin/sh", "/bin/sh", path.c_str(), nullptr);
    ::_exit(127);
  }
  // Wait until sh has started its sleep.
  pid_t sleeper = 0;
  for (int i = 0; i < 5000 && sleeper == 0; ++i) {
    std::vector<pid_t> pids = ListPids().value();
    for (pid_t p : pids) {
      auto st = ReadStat(p);
      if (st && st->ppid == pid && st->comm == "sleep") sleeper = p;
    }
    if (sleeper == 0) ::usleep(1000);
  }
  ASSERT_NE(sleeper, 0);
  Identity root = ReadIdentity(pid).value();
  AttestExpectations e;
  e.title = "sleep";
  e.target = ReadIdentity(sleeper).value();
  // The target's parent is the root, launched through /dev/fd/N, and no
  // closure pins what that descriptor is.
  auto r = Attest(root, e);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "fd_exec_unpinned");
  ::kill(sleeper, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace cordon::proc
