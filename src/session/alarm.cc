#include "session/alarm.h"

namespace cordon::session {

sys::Result<std::unique_ptr<Alarm>> Alarm::Create(sys::Reactor& reactor) {
  CORDON_ASSIGN_OR_RETURN(sys::TimerFd timer, sys::TimerFd::Create());
  std::unique_ptr<Alarm> alarm(new Alarm(reactor, std::move(timer)));
  CORDON_RETURN_IF_ERROR(reactor.Watch(alarm->timer_.fd(), [a = alarm.get()] { a->OnReadable(); }));
  alarm->watching_ = true;
  return alarm;
}

Alarm::~Alarm() {
  if (watching_) reactor_.Unwatch(timer_.fd());
}

void Alarm::Set(std::chrono::nanoseconds after, std::function<void()> fire) {
  fire_ = std::move(fire);
  (void)timer_.Arm(after);  // timerfd_settime on a valid timer cannot fail
}

void Alarm::Cancel() {
  fire_ = nullptr;
  (void)timer_.Disarm();
}

void Alarm::OnReadable() {
  if (!timer_.Consume() || !fire_) return;  // spurious, or cancelled after it fired
  std::function<void()> fire = std::move(fire_);
  fire_ = nullptr;
  fire();  // last: it may destroy this Alarm
}

}  // namespace cordon::session
