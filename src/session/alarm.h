// A one-shot timer on a Reactor (a TimerFd it watches): what sessions use for
// deadlines, graces and housekeeping, on whichever loop runs them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "sys/reactor.h"
#include "sys/timerfd.h"

namespace cordon::session {

class Alarm final {
 public:
  // `reactor` must outlive the Alarm.
  static sys::Result<std::unique_ptr<Alarm>> Create(sys::Reactor& reactor);
  ~Alarm();
  Alarm(const Alarm&) = delete;
  Alarm& operator=(const Alarm&) = delete;

  // Calls `fire` once, `after` from now; replaces an earlier setting.
  // `fire` may destroy the Alarm.
  void Set(std::chrono::nanoseconds after, std::function<void()> fire);
  void Cancel();
  bool armed() const { return static_cast<bool>(fire_); }

 private:
  Alarm(sys::Reactor& reactor, sys::TimerFd timer) : reactor_(reactor), timer_(std::move(timer)) {}
  void OnReadable();

  sys::Reactor& reactor_;
  sys::TimerFd timer_;
  std::function<void()> fire_;
  bool watching_ = false;
};

}  // namespace cordon::session
