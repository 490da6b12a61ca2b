#include "api/asio_reactor.h"

#include <poll.h>

#include <boost/asio/post.hpp>

namespace cordon::api {
namespace {

bool Readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) > 0 && p.revents != 0;
}

}  // namespace

AsioReactor::~AsioReactor() {
  for (auto& [fd, entry] : entries_) {
    boost::system::error_code ignored;
    entry->descriptor.cancel(ignored);
    (void)entry->descriptor.release();
  }
}

sys::Result<void> AsioReactor::Watch(int fd, Handler on_readable) {
  if (entries_.contains(fd))
    return sys::Fail("asio: fd " + std::to_string(fd) + " already watched");
  uint64_t token = next_token_++;
  boost::system::error_code ec;
  auto entry =
      std::make_unique<Entry>(Entry{token, boost::asio::posix::stream_descriptor(io_), nullptr});
  entry->descriptor.assign(fd, ec);
  if (ec)
    return sys::Fail("asio: assign fd " + std::to_string(fd) + ": " + ec.message(), ec.value());
  entry->handler = std::make_shared<Handler>(std::move(on_readable));
  entries_.emplace(fd, std::move(entry));
  Arm(fd, token);
  return {};
}

void AsioReactor::Unwatch(int fd) {
  auto it = entries_.find(fd);
  if (it == entries_.end()) return;
  boost::system::error_code ignored;
  it->second->descriptor.cancel(ignored);
  // The caller owns the descriptor: hand it back instead of closing it.
  (void)it->second->descriptor.release();
  entries_.erase(it);
}

void AsioReactor::Arm(int fd, uint64_t token) {
  auto it = entries_.find(fd);
  if (it == entries_.end() || it->second->token != token) return;
  if (Readable(fd)) {
    // The post may outlive this reactor (a loop that runs on after the
    // daemon is gone): it holds only a weak reference.
    boost::asio::post(io_, [alive = std::weak_ptr<char>(alive_), this, fd, token] {
      if (alive.lock()) Dispatch(fd, token);
    });
    return;
  }
  it->second->descriptor.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                                    [this, fd, token](const boost::system::error_code& ec) {
                                      if (!ec) Dispatch(fd, token);
                                    });
}

void AsioReactor::Dispatch(int fd, uint64_t token) {
  auto it = entries_.find(fd);
  if (it == entries_.end() || it->second->token != token) return;
  // A completed wait is only a hint. Asio (1.74, epoll_reactor.ipp) frees a
  // released descriptor's state while it may still be queued with the
  // events of the last epoll_wait, and gives that very object to the next
  // descriptor assigned, whose wait then completes with those old events:
  // a handler of a descriptor unwatched in this batch (a finished run's
  // pipes) would fire into the one watched in its place (a teardown's
  // verify timer, 20 s early). Only a readable descriptor is dispatched;
  // any other waits again.
  if (!Readable(fd)) {
    Arm(fd, token);
    return;
  }
  // Hold the handler: it may unwatch itself while running.
  std::shared_ptr<Handler> handler = it->second->handler;
  (*handler)();
  Arm(fd, token);
}

}  // namespace cordon::api
