// Threads for work that blocks (an unmount waiting for an RCU grace period,
// an fsync), so that an event loop need not wait for it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace cordon::sys {

// A thread that starts with every signal blocked, so that signals meant for
// the process reach the thread that handles them (the event loop's).
std::thread QuietThread(std::function<void()> body);

// `count` threads taking jobs in the order posted. The destructor lets
// every job already posted finish, then joins.
class Workers final {
 public:
  explicit Workers(unsigned count);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void Post(std::move_only_function<void()> job);

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::move_only_function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Work that blocks, on `threads` Workers, each job's continuation then run
// on a loop: `post` runs a job there and may be called from any thread (an
// event loop's post; null: work and continuation both run at once, where
// they are given). Jobs are given, and continuations run, on that loop. A
// continuation whose Offload is gone by then is dropped; the destructor
// lets every job already given finish first, so whatever the jobs use must
// outlive it (an owner declares its Offload last).
class Offload final {
 public:
  using Post = std::function<void(std::move_only_function<void()>)>;
  Offload(unsigned threads, Post post) : post_(std::move(post)), workers_(threads) {}
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;

  // `work()` on a worker, then `then(what it returned)` (or `then()`) on
  // the loop.
  template <typename Work, typename Then>
  void operator()(Work work, Then then) {
    constexpr bool kVoid = std::is_void_v<std::invoke_result_t<Work&>>;
    if (!post_) {
      if constexpr (kVoid) {
        work();
        then();
      } else {
        then(work());
      }
      return;
    }
    ++pending_;
    workers_.Post([this, work = std::move(work), then = std::move(then),
                   alive = std::weak_ptr<char>(alive_)]() mutable {
      auto back = [this, alive](auto continuation) {
        post_([this, alive, continuation = std::move(continuation)]() mutable {
          if (!alive.lock()) return;
          --pending_;
          continuation();
        });
      };
      if constexpr (kVoid) {
        work();
        back(std::move(then));
      } else {
        back([then = std::move(then), result = work()]() mutable { then(std::move(result)); });
      }
    });
  }

  // Jobs given whose continuation has not run yet.
  size_t pending() const { return pending_; }

 private:
  Post post_;
  size_t pending_ = 0;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
  Workers workers_;  // last: joined first
};

}  // namespace cordon::sys
