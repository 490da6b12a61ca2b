// The library's Reactor on the daemon's Asio loop, so run::Execution (the one
// pump) and contain::Teardown run on the same io_context as the HTTP server:
// no thread per run.
//
// Each watched descriptor gets a posix::stream_descriptor that does not own
// it (released, never closed) and an async_wait(wait_read), re-armed after
// every callback. Asio registers descriptors edge-triggered and a wait is
// never speculative, so a descriptor that is still readable when its handler
// returns (a pipe with more data than one handler reads) would never wake
// again: before re-arming, a poll(2) with no timeout checks the level and,
// if it is readable, the handler is posted at once instead. That gives the
// level-triggered contract sys::Reactor promises.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "sys/reactor.h"

namespace cordon::api {

class AsioReactor final : public sys::Reactor {
 public:
  explicit AsioReactor(boost::asio::io_context& io) : io_(io) {}
  ~AsioReactor() override;
  AsioReactor(const AsioReactor&) = delete;
  AsioReactor& operator=(const AsioReactor&) = delete;

  sys::Result<void> Watch(int fd, Handler on_readable) override;
  void Unwatch(int fd) override;

  boost::asio::io_context& io() { return io_; }
  // Runs a job on this loop; callable from any thread (sys::Offload's post).
  std::function<void(std::move_only_function<void()>)> Poster() {
    return [io = &io_](std::move_only_function<void()> job) {
      boost::asio::post(*io, std::move(job));
    };
  }

 private:
  struct Entry {
    uint64_t token;
    boost::asio::posix::stream_descriptor descriptor;
    std::shared_ptr<Handler> handler;
  };
  void Arm(int fd, uint64_t token);
  void Dispatch(int fd, uint64_t token);

  boost::asio::io_context& io_;
  uint64_t next_token_ = 1;
  // A callback carries the token it was armed with; one that arrives after
  // its fd was unwatched (and perhaps watched again) finds another token and
  // does nothing.
  std::unordered_map<int, std::unique_ptr<Entry>> entries_;
  // Expires with the reactor: a handler posted to the loop checks it first.
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

}  // namespace cordon::api
