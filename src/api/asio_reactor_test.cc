#include "api/asio_reactor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include "run/execution.h"
#include "support.h"
#include "sys/fd.h"

namespace cordon::api {
namespace {

// A handler that reads less than is there must be called again: the
// level-triggered contract, on Asio's edge-triggered registration.
TEST(AsioReactorTest, StaysLevelTriggered) {
  boost::asio::io_context io;
  AsioReactor reactor(io);
  auto pipe = sys::MakePipe();
  ASSERT_TRUE(pipe);
  ASSERT_TRUE(sys::WriteAll(pipe->write.get(), std::string(100, 'x')));
  pipe->write.reset();
  size_t total = 0;
  int calls = 0;
  ASSERT_TRUE(reactor.Watch(pipe->read.get(), [&] {
    ++calls;
    char buf[10];
    ssize_t n = ::read(pipe->read.get(), buf, sizeof buf);  // 10 bytes a wake-up
    if (n > 0) {
      total += static_cast<size_t>(n);
    } else {
      reactor.Unwatch(pipe->read.get());
    }
  }));
  io.run();
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(calls, 11);
}

TEST(AsioReactorTest, UnwatchKeepsTheDescriptorOpen) {
  boost::asio::io_context io;
  AsioReactor reactor(io);
  auto pipe = sys::MakePipe();
  ASSERT_TRUE(reactor.Watch(pipe->read.get(), [] {}));
  reactor.Unwatch(pipe->read.get());
  io.run();
  EXPECT_TRUE(sys::WriteAll(pipe->write.get(), "x"));
  char c;
  EXPECT_EQ(::read(pipe->read.get(), &c, 1), 1);
}

// Asio (1.74) frees an unwatched descriptor's state while that state may
// still be queued with events from the last epoll_wait, and hands the very
// object to the next descriptor assigned: its wait then completes with the
// old events. The reactor must not call a handler whose descriptor is not
// readable (a teardown's verify timer that fired 20 s early, found in
// `cordon mcp` stopping right after a run).
TEST(AsioReactorTest, NoCallbackForEventsOfAnUnwatchedDescriptor) {
  boost::asio::io_context io;
  AsioReactor reactor(io);
  auto a = sys::MakePipe();
  auto b = sys::MakePipe();
  auto c = sys::MakePipe();  // never written: never readable
  ASSERT_TRUE(a && b && c);
  bool swapped = false;
  int c_calls = 0;
  // Whichever of a and b runs first unwatches the other, whose events are
  // already queued, and watches c in its place.
  auto first = [&](int other) {
    return [&, other] {
      if (!swapped) {
        swapped = true;
        reactor.Unwatch(other);
        ASSERT_TRUE(reactor.Watch(c->read.get(), [&] { ++c_calls; }));
      }
      reactor.Unwatch(a->read.get());
      reactor.Unwatch(b->read.get());
    };
  };
  // Watched while empty, so both wait on epoll, not on a post.
  ASSERT_TRUE(reactor.Watch(a->read.get(), first(b->read.get())));
  ASSERT_TRUE(reactor.Watch(b->read.get(), first(a->read.get())));
  ASSERT_TRUE(sys::WriteAll(a->write.get(), "x"));
  ASSERT_TRUE(sys::WriteAll(b->write.get(), "x"));
  // One epoll_wait sees both; then run what it queued, without blocking.
  while (!swapped) ASSERT_GT(io.run_one(), 0u);
  io.poll();
  EXPECT_TRUE(swapped);
  EXPECT_EQ(c_calls, 0) << "a handler ran for a descriptor that is not readable";
  reactor.Unwatch(c->read.get());
}

// The one pump, on the daemon's loop: a run with more output than one
// wake-up reads, and its teardown.
TEST(AsioReactorTest, RunsAnExecution) {
  testing::TempDir state;
  auto store = store::Store::Open(state.path());
  ASSERT_TRUE(store);
  contain::Spec spec;
  spec.shell = "head -c 3000000 /dev/zero; sleep 60 & echo done >&2";
  spec.workspace = state.path();
  auto grant = contain::Acquire(spec, testing::TestProbe(), *store);
  ASSERT_TRUE(grant) << grant.error().message;
  boost::asio::io_context io;
  AsioReactor reactor(io);
  contain::KernelSignaller signaller;
  std::optional<run::RunResult> result;
  auto execution = run::Execution::Start(reactor, *store, signaller, std::move(*grant), spec, {},
                                         [&](run::RunResult r) { result = std::move(r); });
  ASSERT_TRUE(execution);
  io.run();
  ASSERT_TRUE(result);
  EXPECT_EQ(result->outcome, run::Outcome::kExited);
  EXPECT_EQ(result->out.bytes, 3000000u);
  EXPECT_EQ(result->err.data, "done\n");
  EXPECT_TRUE(result->release.dead);
}

}  // namespace
}  // namespace cordon::api
