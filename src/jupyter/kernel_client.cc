#include "jupyter/kernel_client.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace cordon::jupyter {
namespace {

sys::Error ZmqError(const std::string& what) {
  int err = zmq_errno();
  return sys::Error(what + ": " + zmq_strerror(err), err);
}

// Names of the monitors' inproc endpoints, unique within the process.
std::atomic<uint64_t> next_monitor{1};

// The heartbeat only ever echoes our 4-byte ping.
constexpr int64_t kMaxHeartbeatBytes = 4096;

}  // namespace

ZmqContext::ZmqContext() : ctx_(zmq_ctx_new()) {}
ZmqContext::~ZmqContext() {
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

struct KernelClient::Socket {
  void* handle = nullptr;
  int fd = -1;
  // The PAIR end of zmq_socket_monitor(handle), and its ZMQ_FD.
  void* monitor = nullptr;
  int monitor_fd = -1;
  // Its handshake with the kernel finished (a new socket starts without).
  bool connected = false;
  ~Socket() {
    if (monitor != nullptr) {
      zmq_socket_monitor(handle, nullptr, 0);  // stops the monitor first
      zmq_close(monitor);
    }
    if (handle != nullptr) zmq_close(handle);
  }
};

KernelClient::KernelClient(sys::Reactor& reactor, ZmqContext& context, Connection connection,
                           OnMessage on_message, OnDropped on_dropped, OnHeartbeat on_heartbeat,
                           ClientOptions options)
    : reactor_(reactor),
      context_(context),
      connection_(std::move(connection)),
      key_(connection_.key),
      session_(NewUuid()),
      on_message_(std::move(on_message)),
      on_dropped_(std::move(on_dropped)),
      on_heartbeat_(std::move(on_heartbeat)),
      options_(std::move(options)) {}

KernelClient::~KernelClient() {
  for (auto& [channel, socket] : sockets_) {
    reactor_.Unwatch(socket->fd);
    if (socket->monitor != nullptr) reactor_.Unwatch(socket->monitor_fd);
  }
  if (resume_) reactor_.Unwatch(resume_.get());
}

sys::Result<std::unique_ptr<KernelClient>> KernelClient::Connect(
    sys::Reactor& reactor, ZmqContext& context, const Connection& connection, OnMessage on_message,
    OnDropped on_dropped, OnHeartbeat on_heartbeat, ClientOptions options) {
  if (context.get() == nullptr) return std::unexpected(ZmqError("zmq_ctx_new"));
  std::unique_ptr<KernelClient> client(
      new KernelClient(reactor, context, connection, std::move(on_message), std::move(on_dropped),
                       std::move(on_heartbeat), std::move(options)));
  client->resume_ = sys::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!client->resume_) return sys::Fail("eventfd", errno);
  {
    KernelClient* self = client.get();
    CORDON_RETURN_IF_ERROR(reactor.Watch(client->resume_.get(), [self] { self->Resume(); }));
  }
  for (Channel channel : {Channel::kShell, Channel::kControl, Channel::kStdin, Channel::kIopub,
                          Channel::kHeartbeat}) {
    CORDON_RETURN_IF_ERROR(client->Open(channel));
  }
  return client;
}

sys::Result<void> KernelClient::Open(Channel channel) {
  const int type = channel == Channel::kIopub       ? ZMQ_SUB
                   : channel == Channel::kHeartbeat ? ZMQ_REQ
                                                    : ZMQ_DEALER;
  auto socket = std::make_unique<Socket>();
  socket->handle = zmq_socket(context_.get(), type);
  if (socket->handle == nullptr) return std::unexpected(ZmqError("zmq_socket"));
  int linger = 0;
  zmq_setsockopt(socket->handle, ZMQ_LINGER, &linger, sizeof linger);
  // Both before the connect: they apply to the connection it makes.
  int queue = options_.receive_queue;
  zmq_setsockopt(socket->handle, ZMQ_RCVHWM, &queue, sizeof queue);
  int64_t max_bytes =
      channel == Channel::kHeartbeat ? kMaxHeartbeatBytes : options_.max_message_bytes;
  zmq_setsockopt(socket->handle, ZMQ_MAXMSGSIZE, &max_bytes, sizeof max_bytes);
  if (type == ZMQ_DEALER) {
    // The kernel answers shell and stdin requests to the same identity.
    zmq_setsockopt(socket->handle, ZMQ_ROUTING_ID, session_.data(), session_.size());
  }
  if (type == ZMQ_SUB) zmq_setsockopt(socket->handle, ZMQ_SUBSCRIBE, "", 0);
  if (channel != Channel::kHeartbeat && (options_.on_reset || options_.on_connected)) {
    // A disconnect is how libzmq reports a frame over ZMQ_MAXMSGSIZE (and
    // it does not connect again after that protocol error: Monitor does).
    std::string monitor = "inproc://cordon-kernel-monitor-" + std::to_string(next_monitor++);
    const int events = (options_.on_reset ? ZMQ_EVENT_DISCONNECTED : 0) |
                       (options_.on_connected ? ZMQ_EVENT_HANDSHAKE_SUCCEEDED : 0);
    if (zmq_socket_monitor(socket->handle, monitor.c_str(), events) != 0) {
      return std::unexpected(ZmqError("zmq_socket_monitor"));
    }
    socket->monitor = zmq_socket(context_.get(), ZMQ_PAIR);
    if (socket->monitor == nullptr) return std::unexpected(ZmqError("zmq_socket(ZMQ_PAIR)"));
    zmq_setsockopt(socket->monitor, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(socket->monitor, monitor.c_str()) != 0) {
      return std::unexpected(ZmqError("zmq_connect(" + monitor + ")"));
    }
    size_t size = sizeof socket->monitor_fd;
    if (zmq_getsockopt(socket->monitor, ZMQ_FD, &socket->monitor_fd, &size) != 0) {
      return std::unexpected(ZmqError("zmq_getsockopt(ZMQ_FD) of a monitor"));
    }
  }
  std::string endpoint = connection_.Endpoint(channel);
  if (zmq_connect(socket->handle, endpoint.c_str()) != 0) {
    return std::unexpected(ZmqError("zmq_connect(" + endpoint + ")"));
  }
  size_t size = sizeof socket->fd;
  if (zmq_getsockopt(socket->handle, ZMQ_FD, &socket->fd, &size) != 0) {
    return std::unexpected(ZmqError("zmq_getsockopt(ZMQ_FD)"));
  }
  CORDON_RETURN_IF_ERROR(reactor_.Watch(socket->fd, [this, channel] { Drain(channel); }));
  const bool monitored = socket->monitor != nullptr;
  if (monitored) {
    if (auto watched = reactor_.Watch(socket->monitor_fd, [this, channel] { Monitor(channel); });
        !watched) {
      reactor_.Unwatch(socket->fd);
      return watched;
    }
  }
  sockets_[channel] = std::move(socket);
  // ZMQ_FD signals only what changes after a look at ZMQ_EVENTS (an inproc
  // pipe with nothing read yet never signals its first message): look once.
  if (monitored) Monitor(channel);
  return {};
}

void KernelClient::Close(Channel channel) {
  auto it = sockets_.find(channel);
  if (it == sockets_.end()) return;
  reactor_.Unwatch(it->second->fd);
  if (it->second->monitor != nullptr) reactor_.Unwatch(it->second->monitor_fd);
  sockets_.erase(it);
  backlog_.erase(channel);
}

void KernelClient::Monitor(Channel channel) {
  auto it = sockets_.find(channel);
  if (it == sockets_.end() || it->second->monitor == nullptr) return;
  void* monitor = it->second->monitor;
  bool reset = false;
  bool handshake = false;
  while (true) {
    int events = 0;
    size_t size = sizeof events;
    if (zmq_getsockopt(monitor, ZMQ_EVENTS, &events, &size) != 0 || !(events & ZMQ_POLLIN)) break;
    // Two frames: {uint16 event, uint32 value}, then the endpoint.
    bool first = true;
    while (true) {
      zmq_msg_t part;
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&part);
        break;
      }
      if (first && zmq_msg_size(&part) >= sizeof(uint16_t)) {
        uint16_t event;
        std::memcpy(&event, zmq_msg_data(&part), sizeof event);
        if (event == ZMQ_EVENT_DISCONNECTED) reset = true;
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) handshake = true;
      }
      first = false;
      bool more = zmq_msg_more(&part) != 0;
      zmq_msg_close(&part);
      if (!more) break;
    }
  }
  if (handshake && !reset) {
    it->second->connected = true;
    // Last: the handler may do anything but destroy this client.
    if (options_.on_connected) options_.on_connected(channel);
    return;
  }
  if (!reset) return;
  // What the old socket took in before the reset is read first (the event
  // may come before the reactor saw the data): a few messages at most, and
  // nothing more can arrive on it.
  do {
    backlog_.erase(channel);
    Drain(channel);
  } while (backlog_.contains(channel));
  // The connection is gone for good after a protocol error: a new socket
  // connects again (the kernel's PUB and ROUTER take new peers).
  Close(channel);
  if (auto opened = Open(channel); !opened && on_dropped_) {
    on_dropped_(channel, "could not connect again after a reset: " + opened.error().message());
  }
  // Last: the handler may do anything but destroy this client.
  if (options_.on_reset) options_.on_reset(channel);
}

Message KernelClient::Make(std::string_view msg_type, nlohmann::json content,
                           const Message* parent) const {
  return NewMessage(session_, msg_type, std::move(content), parent);
}

bool KernelClient::connected() const {
  for (Channel channel : {Channel::kShell, Channel::kControl, Channel::kStdin}) {
    auto it = sockets_.find(channel);
    if (it == sockets_.end() || !it->second->connected) return false;
  }
  return true;
}

sys::Result<std::string> KernelClient::Send(Channel channel, const Message& message) {
  if (channel == Channel::kIopub || channel == Channel::kHeartbeat) {
    return sys::Fail("cannot send on the " + std::string(ChannelName(channel)) + " channel",
                     EINVAL);
  }
  Socket& socket = *sockets_.at(channel);
  std::vector<std::string> frames = Serialize(message, key_);
  for (size_t i = 0; i < frames.size(); ++i) {
    int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(socket.handle, frames[i].data(), frames[i].size(), flags) < 0) {
      return std::unexpected(ZmqError("zmq_send"));
    }
  }
  // Sending may have consumed the socket's readiness signal: look now.
  Drain(channel);
  return message.msg_id();
}

sys::Result<void> KernelClient::Ping() {
  Socket& socket = *sockets_.at(Channel::kHeartbeat);
  if (zmq_send(socket.handle, "ping", 4, ZMQ_DONTWAIT) < 0) {
    return std::unexpected(ZmqError("zmq_send(heartbeat)"));
  }
  Drain(Channel::kHeartbeat);
  return {};
}

void KernelClient::Drain(Channel channel) {
  auto it = sockets_.find(channel);
  if (it == sockets_.end()) return;
  void* handle = it->second->handle;
  size_t bytes = 0;
  for (int handled = 0;; ++handled) {
    if (handled == kBatch || bytes >= kBatchBytes) {
      backlog_.insert(channel);
      uint64_t one = 1;
      (void)!::write(resume_.get(), &one, sizeof one);
      return;
    }
    int events = 0;
    size_t size = sizeof events;
    // Reading ZMQ_EVENTS also clears the fd's signal: the reactor sleeps again.
    if (zmq_getsockopt(handle, ZMQ_EVENTS, &events, &size) != 0 || !(events & ZMQ_POLLIN)) return;
    std::vector<std::string> frames;
    while (true) {
      zmq_msg_t part;
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, handle, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&part);
        return;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
      bytes += frames.back().size();
      bool more = zmq_msg_more(&part) != 0;
      zmq_msg_close(&part);
      if (!more) break;
    }
    if (channel == Channel::kHeartbeat) {
      if (on_heartbeat_) on_heartbeat_();
      continue;
    }
    auto message = Parse(frames, key_);
    if (!message) {
      if (on_dropped_) on_dropped_(channel, message.error());
      continue;
    }
    if (on_message_) on_message_(channel, *message);
  }
}

void KernelClient::Resume() {
  uint64_t count;
  (void)!::read(resume_.get(), &count, sizeof count);
  auto channels = std::exchange(backlog_, {});
  for (Channel channel : channels) Drain(channel);
}

}  // namespace cordon::jupyter
