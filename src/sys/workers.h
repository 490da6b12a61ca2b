// Threads for work that blocks (an unmount waiting for an RCU grace period,
// an fsync), so that an event loop need not wait for it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
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

}  // namespace cordon::sys
