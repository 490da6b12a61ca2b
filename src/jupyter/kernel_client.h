// A client of one Jupyter kernel over ZeroMQ, driven by a sys::Reactor:
// each socket's ZMQ_FD is watched, and every message received is verified
// (wire.h) before it reaches the handler; one that fails is dropped and
// reported. Nothing blocks: sends are non-blocking, receives happen when the
// reactor says a socket is ready.
//
// Memory: what the daemon holds of a kernel's output is bounded, whatever
// the kernel sends. libzmq's I/O thread reads ahead of the daemon into a
// queue of at most ClientOptions::receive_queue messages per socket (its
// default, 1000, held a gigabyte of a flooding kernel's 1 MiB messages);
// past it the kernel's own queue fills, in the kernel's memory, and its PUB
// socket drops. A frame over ClientOptions::max_message_bytes ends the
// connection (ZMQ_MAXMSGSIZE: libzmq would otherwise allocate whatever size
// the peer announces); the socket connects again by itself, and `on_reset`
// says that messages were lost.
#pragma once

#include <cstdint>
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

struct ClientOptions {
  // Messages libzmq may hold per socket before the daemon reads them.
  int receive_queue = 4;
  // A larger frame from the kernel ends that connection (it is made again).
  int64_t max_message_bytes = int64_t{64} << 20;
  // A connection (not heartbeat) to the kernel ended: a frame over
  // max_message_bytes, or the kernel's end. What was in flight is lost.
  std::function<void(Channel)> on_reset;
  // A request channel (shell, control, stdin) finished its handshake with
  // the kernel. Until then the kernel's ROUTER does not know this client on
  // it and drops what it addresses there: an input_request on stdin, the
  // one message a kernel sends unasked. Each socket connects on its own
  // reconnect timer, so shell may answer while stdin is not yet connected.
  std::function<void(Channel)> on_connected;
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
      OnMessage on_message, OnDropped on_dropped, OnHeartbeat on_heartbeat = {},
      ClientOptions options = {});
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
  // Shell, control and stdin have each finished a handshake with the kernel
  // (on_connected has run for each). Needs a monitor: on_reset or
  // on_connected set.
  bool connected() const;

 private:
  struct Socket;
  KernelClient(sys::Reactor& reactor, ZmqContext& context, Connection connection,
               OnMessage on_message, OnDropped on_dropped, OnHeartbeat on_heartbeat,
               ClientOptions options);
  // Makes, connects and watches the socket of `channel`.
  sys::Result<void> Open(Channel channel);
  void Close(Channel channel);
  void Drain(Channel channel);
  void Resume();
  // Reads a socket monitor's events; ZMQ_EVENT_HANDSHAKE_SUCCEEDED marks
  // the socket connected and runs on_connected; on ZMQ_EVENT_DISCONNECTED
  // the socket is made again and on_reset runs.
  void Monitor(Channel channel);

  // A kernel that floods must not keep the loop to itself: Drain handles
  // at most this many messages, or the first message that takes it past
  // this many bytes, then yields and is resumed from the loop.
  static constexpr int kBatch = 64;
  static constexpr size_t kBatchBytes = 1 << 20;

  sys::Reactor& reactor_;
  ZmqContext& context_;
  Connection connection_;
  std::string key_;
  std::string session_;
  OnMessage on_message_;
  OnDropped on_dropped_;
  OnHeartbeat on_heartbeat_;
  ClientOptions options_;
  std::map<Channel, std::unique_ptr<Socket>> sockets_;
  // Readable while a channel that hit kBatch waits in `backlog_`: ZMQ_FD
  // only signals new events, so a yielded socket with messages left would
  // never wake the reactor again by itself.
  sys::UniqueFd resume_;
  std::set<Channel> backlog_;
};

}  // namespace cordon::jupyter
