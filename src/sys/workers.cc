#include "sys/workers.h"

#include <signal.h>

namespace cordon::sys {

std::thread QuietThread(std::function<void()> body) {
  sigset_t all, saved;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &saved);
  std::thread thread(std::move(body));  // inherits the mask
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return thread;
}

Workers::Workers(unsigned count) {
  for (unsigned i = 0; i < count; ++i) threads_.push_back(QuietThread([this] { Loop(); }));
}

Workers::~Workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void Workers::Post(std::move_only_function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void Workers::Loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

}  // namespace cordon::sys
