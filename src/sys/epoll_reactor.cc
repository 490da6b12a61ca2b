#include "sys/epoll_reactor.h"

#include <sys/epoll.h>

#include <cerrno>

namespace cordon::sys {

Result<EpollReactor> EpollReactor::Create() {
  int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return FailErrno("epoll_create1");
  return EpollReactor(UniqueFd(fd));
}

Result<void> EpollReactor::Watch(int fd, Handler on_readable) {
  return Add(fd, EPOLLIN, std::move(on_readable));
}

Result<void> EpollReactor::WatchWritable(int fd, Handler on_writable) {
  return Add(fd, EPOLLOUT, std::move(on_writable));
}

Result<void> EpollReactor::Add(int fd, uint32_t events, Handler handler) {
  if (entries_.contains(fd)) return Fail("epoll: fd " + std::to_string(fd) + " already watched");
  uint64_t token = next_token_++;
  struct epoll_event ev {};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return FailErrno("epoll_ctl(ADD, " + std::to_string(fd) + ")");
  }
  entries_[fd] = Entry{token, std::make_shared<Handler>(std::move(handler))};
  fd_by_token_[token] = fd;
  return {};
}

void EpollReactor::Unwatch(int fd) {
  auto it = entries_.find(fd);
  if (it == entries_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  fd_by_token_.erase(it->second.token);
  entries_.erase(it);
}

Result<void> EpollReactor::RunUntil(const std::function<bool()>& done) {
  struct epoll_event events[16];
  while (!done()) {
    if (entries_.empty()) return Fail("epoll: nothing left to wait for");
    int n = ::epoll_wait(epoll_.get(), events, 16, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FailErrno("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      auto token = fd_by_token_.find(events[i].data.u64);
      if (token == fd_by_token_.end()) continue;  // unwatched earlier in this batch
      // Hold the handler: it may unwatch itself while running.
      std::shared_ptr<Handler> handler = entries_.at(token->second).handler;
      (*handler)();
    }
  }
  return {};
}

}  // namespace cordon::sys
