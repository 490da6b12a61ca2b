#include "jupyter/kernel_client.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>

namespace cordon::jupyter {
namespace {

sys::Error ZmqError(const std::string& what) {
  int err = zmq_errno();
  return sys::Error(what + ": " + zmq_strerror(err), err);
}

}  // namespace

ZmqContext::ZmqContext() : ctx_(zmq_ctx_new()) {}
ZmqContext::~ZmqContext() {
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

struct KernelClient::Socket {
  void* handle = nullptr;
  int fd = -1;
  ~Socket() {
    if (handle != nullptr) zmq_close(handle);
  }
};

KernelClient::KernelClient(sys::Reactor& reactor, std::string key, OnMessage on_message,
                           OnDropped on_dropped, OnHeartbeat on_heartbeat)
    : reactor_(reactor),
      key_(std::move(key)),
      session_(NewUuid()),
      on_message_(std::move(on_message)),
      on_dropped_(std::move(on_dropped)),
      on_heartbeat_(std::move(on_heartbeat)) {}

KernelClient::~KernelClient() {
  for (auto& [channel, socket] : sockets_) reactor_.Unwatch(socket->fd);
  if (resume_) reactor_.Unwatch(resume_.get());
}

sys::Result<std::unique_ptr<KernelClient>> KernelClient::Connect(
    sys::Reactor& reactor, ZmqContext& context, const Connection& connection, OnMessage on_message,
    OnDropped on_dropped, OnHeartbeat on_heartbeat) {
  if (context.get() == nullptr) return std::unexpected(ZmqError("zmq_ctx_new"));
  std::unique_ptr<KernelClient> client(
      new KernelClient(reactor, connection.key, std::move(on_message), std::move(on_dropped),
                       std::move(on_heartbeat)));
  const std::pair<Channel, int> kinds[] = {{Channel::kShell, ZMQ_DEALER},
                                           {Channel::kControl, ZMQ_DEALER},
                                           {Channel::kStdin, ZMQ_DEALER},
                                           {Channel::kIopub, ZMQ_SUB},
                                           {Channel::kHeartbeat, ZMQ_REQ}};
  client->resume_ = sys::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!client->resume_) return sys::Fail("eventfd", errno);
  {
    KernelClient* self = client.get();
    CORDON_RETURN_IF_ERROR(reactor.Watch(client->resume_.get(), [self] { self->Resume(); }));
  }
  std::string identity = client->session_;
  for (auto [channel, type] : kinds) {
    auto socket = std::make_unique<Socket>();
    socket->handle = zmq_socket(context.get(), type);
    if (socket->handle == nullptr) return std::unexpected(ZmqError("zmq_socket"));
    int linger = 0;
    zmq_setsockopt(socket->handle, ZMQ_LINGER, &linger, sizeof linger);
    if (type == ZMQ_DEALER) {
      // The kernel answers shell and stdin requests to the same identity.
      zmq_setsockopt(socket->handle, ZMQ_ROUTING_ID, identity.data(), identity.size());
    }
    if (type == ZMQ_SUB) zmq_setsockopt(socket->handle, ZMQ_SUBSCRIBE, "", 0);
    std::string endpoint = connection.Endpoint(channel);
    if (zmq_connect(socket->handle, endpoint.c_str()) != 0) {
      return std::unexpected(ZmqError("zmq_connect(" + endpoint + ")"));
    }
    size_t size = sizeof socket->fd;
    if (zmq_getsockopt(socket->handle, ZMQ_FD, &socket->fd, &size) != 0) {
      return std::unexpected(ZmqError("zmq_getsockopt(ZMQ_FD)"));
    }
    KernelClient* self = client.get();
    CORDON_RETURN_IF_ERROR(reactor.Watch(socket->fd, [self, channel] { self->Drain(channel); }));
    client->sockets_[channel] = std::move(socket);
  }
  return client;
}

Message KernelClient::Make(std::string_view msg_type, nlohmann::json content,
                           const Message* parent) const {
  return NewMessage(session_, msg_type, std::move(content), parent);
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
