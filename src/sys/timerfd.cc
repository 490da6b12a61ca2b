#include "sys/timerfd.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdint>

namespace cordon::sys {

Result<TimerFd> TimerFd::Create() {
  int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (fd < 0) return FailErrno("timerfd_create(CLOCK_MONOTONIC)");
  return TimerFd(UniqueFd(fd));
}

Result<void> TimerFd::Arm(std::chrono::nanoseconds after) {
  // An all-zero it_value would disarm the timer; fire after 1 ns instead.
  auto ns = std::max<int64_t>(after.count(), 1);
  struct itimerspec spec {};
  spec.it_value.tv_sec = ns / 1'000'000'000;
  spec.it_value.tv_nsec = ns % 1'000'000'000;
  if (::timerfd_settime(fd_.get(), 0, &spec, nullptr) != 0) return FailErrno("timerfd_settime");
  return {};
}

Result<void> TimerFd::Disarm() {
  struct itimerspec spec {};
  if (::timerfd_settime(fd_.get(), 0, &spec, nullptr) != 0) return FailErrno("timerfd_settime");
  return {};
}

bool TimerFd::Consume() {
  uint64_t expirations = 0;
  return ::read(fd_.get(), &expirations, sizeof expirations) == sizeof expirations;
}

}  // namespace cordon::sys
