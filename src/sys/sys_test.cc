#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "sys/epoll_reactor.h"
#include "sys/error.h"
#include "sys/fd.h"
#include "sys/pidfd.h"
#include "sys/random.h"
#include "sys/text.h"
#include "sys/timerfd.h"
#include "sys/workers.h"

namespace cordon::sys {
namespace {

TEST(RandomTest, HexAndUuidsAreFreshAndWellFormed) {
  std::string hex = RandomHex(16);
  EXPECT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(hex, RandomHex(16));
  std::string a = RandomUuid();
  ASSERT_EQ(a.size(), 36u);
  for (size_t dash : {8, 13, 18, 23}) EXPECT_EQ(a[dash], '-') << a;
  EXPECT_EQ(a[14], '4') << a;                                          // version 4
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos) << a;  // RFC 4122 variant
  EXPECT_NE(a, RandomUuid());
}

TEST(ErrorTest, NamesTheErrno) {
  EXPECT_EQ(ErrnoName(ENOENT), "ENOENT");
  EXPECT_EQ(ErrnoFromName("EACCES"), EACCES);
  EXPECT_EQ(ErrnoFromName("ENOTHING"), 0);
  Error e("open(\"/x\")", ENOENT);
  EXPECT_EQ(e.message(), "open(\"/x\"): ENOENT (No such file or directory)");
  EXPECT_EQ(e.Context("read config").what(), "read config: open(\"/x\")");
}

TEST(FdTest, ReadAndWriteFiles) {
  char tmpl[] = "/tmp/cordon-fd.XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  UniqueFd owned(fd);
  ASSERT_TRUE(WriteFile(tmpl, "hello"));
  auto text = ReadFile(tmpl);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "hello");
  EXPECT_EQ(ReadFile(tmpl, 3).value(), "hel");
  ::unlink(tmpl);
  auto missing = ReadFile(tmpl);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
}

TEST(FdTest, ASpareSocketFailsOnlyWhereNoDescriptorIsFree) {
  EXPECT_TRUE(SpareSocket().has_value());
  struct rlimit was {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &was), 0);
  // A new descriptor takes the lowest number free: below 3 none is.
  struct rlimit none = was;
  none.rlim_cur = 3;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &none), 0);
  auto starved = SpareSocket();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &was), 0);
  ASSERT_FALSE(starved.has_value());
  EXPECT_EQ(starved.error().errno_value(), EMFILE) << starved.error().message();
  EXPECT_TRUE(SpareSocket().has_value());
}

TEST(EpollReactorTest, DispatchesAndUnwatchesFromInsideAHandler) {
  auto reactor = EpollReactor::Create();
  ASSERT_TRUE(reactor);
  auto a = MakePipe(O_NONBLOCK);
  auto b = MakePipe(O_NONBLOCK);
  ASSERT_TRUE(a && b);
  int a_calls = 0, b_calls = 0;
  ASSERT_TRUE(reactor->Watch(a->read.get(), [&] {
    ++a_calls;
    reactor->Unwatch(a->read.get());
    reactor->Unwatch(b->read.get());  // b's pending event must not be delivered
  }));
  ASSERT_TRUE(reactor->Watch(b->read.get(), [&] { ++b_calls; }));
  ASSERT_TRUE(WriteAll(a->write.get(), "x"));
  ASSERT_TRUE(WriteAll(b->write.get(), "y"));
  // Both are readable; whichever handler runs first, a's unwatches both.
  auto ran = reactor->RunUntil([&] { return a_calls > 0; });
  ASSERT_TRUE(ran);
  EXPECT_EQ(a_calls, 1);
  EXPECT_LE(b_calls, 1);
  EXPECT_FALSE(reactor->RunUntil([] { return false; }));  // nothing left to wait for
}

TEST(TimerFdTest, FiresOnceAfterTheDelay) {
  auto reactor = EpollReactor::Create();
  auto timer = TimerFd::Create();
  ASSERT_TRUE(reactor && timer);
  int fired = 0;
  ASSERT_TRUE(reactor->Watch(timer->fd(), [&] {
    if (timer->Consume()) ++fired;
  }));
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(timer->Arm(std::chrono::milliseconds(20)));
  ASSERT_TRUE(reactor->RunUntil([&] { return fired > 0; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
  EXPECT_FALSE(timer->Consume());
}

TEST(PidFdTest, SignalsAndReapsAChild) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  auto fd = PidFd::Open(pid);
  ASSERT_TRUE(fd);
  EXPECT_FALSE(fd->HasExited());
  auto early = fd->TryReap();
  ASSERT_TRUE(early);
  EXPECT_FALSE(early->has_value());
  ASSERT_TRUE(fd->SendSignal(SIGKILL));
  auto exit = fd->Reap();
  ASSERT_TRUE(exit);
  EXPECT_TRUE(exit->signaled);
  EXPECT_EQ(exit->status, SIGKILL);
  // Reaped: the pidfd still names that process and signals nothing else.
  auto again = fd->SendSignal(SIGKILL);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().errno_value(), ESRCH);
}

TEST(PidFdTest, OpeningAMissingProcessFails) {
  auto fd = PidFd::Open(0x3ffffff);  // above pid_max
  ASSERT_FALSE(fd);
}

TEST(TextTest, Base64RoundTripsEveryLengthAndRefusesWhatIsNotBase64) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) {
    std::string encoded = Base64Encode(bytes);
    EXPECT_EQ(encoded.size() % 4, 0u) << i;
    EXPECT_EQ(Base64Decode(encoded), bytes) << encoded;
    bytes.push_back(static_cast<char>(0xf0 + i));  // high bytes and NUL-free
  }
  EXPECT_EQ(Base64Encode("hi"), "aGk=");
  EXPECT_EQ(Base64Decode("aGk="), "hi");
  for (const char* bad : {"aGk", "a@k=", "aGk=aGk", "====", "a===", "a=bc", " aGk", "aGk=\n"}) {
    EXPECT_FALSE(Base64Decode(bad).has_value()) << bad;
  }
}

TEST(TextTest, IsUtf8AcceptsWellFormedTextOnly) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("plain ascii"));
  EXPECT_TRUE(IsUtf8("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  for (const char* bad : {"\xc3", "\xe2\x82", "\xc0\xaf",         // cut, overlong /
                          "\xed\xa0\x80",                         // a UTF-16 surrogate
                          "\xf4\x90\x80\x80",                     // past U+10FFFF
                          "\xff", "\x80"}) {
    EXPECT_FALSE(IsUtf8(bad)) << bad;
  }
}

TEST(TextTest, SplitCommasKeepsEveryFieldAsWritten) {
  using Fields = std::vector<std::string_view>;
  EXPECT_EQ(SplitCommas("ready,busy"), (Fields{"ready", "busy"}));
  EXPECT_EQ(SplitCommas("one"), (Fields{"one"}));
  EXPECT_EQ(SplitCommas(""), (Fields{""}));
  EXPECT_EQ(SplitCommas(",a, b ,"), (Fields{"", "a", " b ", ""}));
}

TEST(TextTest, JoinNamesListsWhatItIsGiven) {
  EXPECT_EQ(JoinNames(std::vector<std::string>{"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(JoinNames(std::vector<std::string_view>{"", "x"}), ", x");
  EXPECT_EQ(JoinNames(std::vector<const char*>{}), "");
}

TEST(WorkersTest, RunsJobsInOrderAndFinishesThemBeforeItGoes) {
  std::vector<int> done;
  {
    Workers one(1);
    for (int i = 0; i < 50; ++i) {
      one.Post([&done, i] {
        ::usleep(200);
        done.push_back(i);
      });
    }
  }  // every job posted has run by now
  ASSERT_EQ(done.size(), 50u);
  EXPECT_TRUE(std::is_sorted(done.begin(), done.end()));
}

TEST(WorkersTest, ItsThreadsBlockEverySignal) {
  std::atomic<bool> term_blocked = false, chld_blocked = false;
  {
    Workers workers(2);
    workers.Post([&] {
      sigset_t mask;
      ::pthread_sigmask(SIG_BLOCK, nullptr, &mask);
      term_blocked = ::sigismember(&mask, SIGTERM) == 1;
      chld_blocked = ::sigismember(&mask, SIGCHLD) == 1;
    });
  }
  EXPECT_TRUE(term_blocked);
  EXPECT_TRUE(chld_blocked);
  // The caller's own mask is as it was.
  sigset_t mask;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_NE(::sigismember(&mask, SIGTERM), 1);
}

// A loop for Offload: what is posted to it waits until the test runs it.
struct TestLoop {
  std::mutex mutex;
  std::condition_variable posted;
  std::deque<std::move_only_function<void()>> jobs;

  Offload::Post Poster() {
    return [this](std::move_only_function<void()> job) {
      std::lock_guard lock(mutex);
      jobs.push_back(std::move(job));
      posted.notify_one();
    };
  }
  // Runs `n` posted jobs here, waiting for each.
  void Run(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      std::unique_lock lock(mutex);
      ASSERT_TRUE(posted.wait_for(lock, std::chrono::seconds(30), [&] { return !jobs.empty(); }));
      auto job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      job();
    }
  }
};

TEST(OffloadTest, WorkRunsOnAWorkerAndItsContinuationOnTheLoop) {
  TestLoop loop;
  Offload offload(2, loop.Poster());
  const auto here = std::this_thread::get_id();
  std::thread::id worked, continued;
  int got = 0;
  bool plain = false;
  offload(
      [&] {
        worked = std::this_thread::get_id();
        return 42;
      },
      [&](int value) {
        continued = std::this_thread::get_id();
        got = value;
      });
  offload([] {}, [&] { plain = true; });  // work that returns nothing
  EXPECT_EQ(offload.pending(), 2u);
  loop.Run(2);
  EXPECT_NE(worked, here);
  EXPECT_EQ(continued, here);
  EXPECT_EQ(got, 42);
  EXPECT_TRUE(plain);
  EXPECT_EQ(offload.pending(), 0u);
}

TEST(OffloadTest, AContinuationAfterTheOffloadIsGoneIsDropped) {
  TestLoop loop;
  std::atomic<bool> worked = false;
  bool continued = false;
  {
    Offload offload(1, loop.Poster());
    offload([&] { worked = true; }, [&] { continued = true; });
  }  // the work is finished before the Offload goes
  EXPECT_TRUE(worked);
  loop.Run(1);
  EXPECT_FALSE(continued);
}

}  // namespace
}  // namespace cordon::sys
