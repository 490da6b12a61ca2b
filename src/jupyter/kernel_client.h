// A client of one Jupyter kernel over ZeroMQ, driven by a sys::Reactor:
// each socket's ZMQ_FD is watched, and every message received is verified
// (wire.h) before it reaches the handler; one that fails is dropped and
// reported. Nothing blocks: sends are non-blocking, receives happen when the
// reactor says a socket is ready.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "jupyter/connection.h"
#include "jupyter/wire.h"
#include "sys/fd.h"
#include "sys/reactor.h"

namespace cordon::jupyter {

// One ZeroMQ context (its I/O thread) shared by every client.
class ZmqContext final {
 public:
  ZmqContext();
  ~ZmqContext();
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;
  void* get() const { return ctx_; }

 private:
  void* ctx_;
};

// Handlers run on the reactor and must not destroy the client they belong
// to (post that to the loop instead).
class KernelClient final {
 public:
  using OnMessage = std::function<void(Channel, const Message&)>;
  // A message that failed verification or parsing, and why.
  using OnDropped = std::function<void(Channel, const std::string& why)>;
  // The heartbeat echoed.
  using OnHeartbeat = std::function<void()>;

  static sys::Result<std::unique_ptr<KernelClient>> Connect(
      sys::Reactor& reactor, ZmqContext& context, const Connection& connection,
      OnMessage on_message, OnDropped on_dropped, OnHeartbeat on_heartbeat = {});
  ~KernelClient();
  KernelClient(const KernelClient&) = delete;
  KernelClient& operator=(const KernelClient&) = delete;

  // Signs and sends; returns the message's id. kIopub and kHeartbeat cannot
  // be sent on.
  sys::Result<std::string> Send(Channel channel, const Message& message);
  // A new message of this client's session.
  Message Make(std::string_view msg_type, nlohmann::json content = nlohmann::json::object(),
               const Message* parent = nullptr) const;
  // Sends a heartbeat ping; OnHeartbeat runs when it comes back.
  sys::Result<void> Ping();

  const std::string& session() const { return session_; }

 private:
  struct Socket;
  KernelClient(sys::Reactor& reactor, std::string key, OnMessage on_message, OnDropped on_dropped,
               OnHeartbeat on_heartbeat);
  void Drain(Channel channel);
  void Resume();

  // A kernel that floods must not keep the loop to itself: Drain handles
  // at most this many messages, or the first message that takes it past
  // this many bytes, then yields and is resumed from the loop.
  static constexpr int kBatch = 64;
  static constexpr size_t kBatchBytes = 1 << 20;

  sys::Reactor& reactor_;
  std::string key_;
  std::string session_;
  OnMessage on_message_;
  OnDropped on_dropped_;
  OnHeartbeat on_heartbeat_;
  std::map<Channel, std::unique_ptr<Socket>> sockets_;
  // Readable while a channel that hit kBatch waits in `backlog_`: ZMQ_FD
  // only signals new events, so a yielded socket with messages left would
  // never wake the reactor again by itself.
  sys::UniqueFd resume_;
  std::set<Channel> backlog_;
};

}  // namespace cordon::jupyter
