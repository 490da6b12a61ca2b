#include "gateway/channels.h"

#include <array>
#include <optional>

#include "api/log.h"
#include "jupyter/wire.h"

namespace cordon::gateway {
namespace {

using jupyter::Channel;
using nlohmann::json;

// A client keeps at most this many requests awaiting their replies; older
// ones are forgotten (their replies then reach no one).
constexpr size_t kMaxPendingRequests = 10000;
// What clients may have sent to a kernel that is still starting, in all: a
// client that sends more while it waits is refused, not buffered.
constexpr size_t kMaxWaitingBytes = 16 << 20;
// The iopub messages kept for a client that left, in all (per kernel, for as
// long as no client is connected): past it the rest of the stream is
// dropped. Replies are kept whatever their size: one per request it sent.
constexpr size_t kMaxKeptBytes = 4 << 20;

// A whole Jupyter message of the daemon's own, on iopub: every header field
// a client validates (JupyterLab throws on a message without one).
jupyter::Message Made(const std::string& msg_type, json parent, json content) {
  jupyter::Message m;
  m.header = {{"msg_id", jupyter::NewUuid()}, {"msg_type", msg_type},      {"session", "cordon"},
              {"username", "cordon"},         {"date", jupyter::IsoNow()}, {"version", "5.3"}};
  m.parent_header = parent.is_object() ? std::move(parent) : json::object();
  m.content = std::move(content);
  return m;
}

void Send(api::WebSocket& socket, ClientFrame frame) {
  if (frame.binary) {
    socket.SendBinary(std::move(frame.bytes));
  } else {
    socket.Send(std::move(frame.bytes));
  }
}

}  // namespace

void Relay::Connect(const std::string& id, std::shared_ptr<api::WebSocket> socket,
                    std::string client_session) {
  const uint64_t n = next_client_++;
  Entry& e = kernels_[id];
  const Client client{socket, ProtocolOf(socket->subprotocol()), std::move(client_session)};
  e.clients[n] = client;
  e.last_activity = jupyter::IsoNow();
  if (sessions_) sessions_->ClientConnected(id);
  api::WebSocket::Handlers handlers;
  handlers.message = [this, id, n](std::string text) { FromClient(id, n, std::move(text), false); };
  handlers.binary = [this, id, n](std::string bytes) { FromClient(id, n, std::move(bytes), true); };
  handlers.closed = [this, id, n] {
    auto it = kernels_.find(id);
    if (it == kernels_.end()) return;
    Entry& e = it->second;
    auto gone = e.clients.find(n);
    if (gone == e.clients.end()) return;
    const std::string session = gone->second.session;
    e.clients.erase(gone);
    if (sessions_) sessions_->ClientLeft(id);
    std::erase_if(e.waiting, [n](const Pending& p) { return p.client == n; });
    if (e.clients.empty() && !session.empty()) {
      // The last one: its replies and the kernel's iopub are kept for it.
      e.left_session = session;
      e.kept.clear();
      e.kept_bytes = 0;
      std::erase_if(e.requests, [](const auto& r) { return r.second == kLeft; });
      for (auto& [msg_id, owner] : e.requests) {
        if (owner == n) owner = kLeft;
      }
    }
    std::erase_if(e.requests, [n](const auto& r) { return r.second == n; });
  };
  socket->Start(std::move(handlers));
  if (!e.left_session) return;
  // A client came back: the same session gets what was kept, in order, and
  // the requests it left waiting; another finds none of it.
  auto kept = std::move(e.kept);
  const bool same = *e.left_session == client.session;
  e.left_session.reset();
  e.kept.clear();
  e.kept_bytes = 0;
  for (auto r = e.requests.begin(); r != e.requests.end();) {
    if (r->second != kLeft) {
      ++r;
    } else if (same) {
      (r++)->second = n;
    } else {
      r = e.requests.erase(r);
    }
  }
  if (!same) return;
  for (const Kept& k : kept) {
    Deliver(client, FrameForClient(k.channel, k.message, client.protocol), k.message);
  }
}

bool Relay::Keep(Entry& e, std::string_view channel, const jupyter::Message& message) {
  if (!e.left_session || !e.clients.empty()) return false;
  if (channel == "iopub") {
    size_t bytes = message.content.dump().size() + 1024;  // the header and the rest are small
    for (const auto& b : message.buffers) bytes += b.size();
    if (e.kept_bytes + bytes > kMaxKeptBytes) return true;  // dropped
    e.kept_bytes += bytes;
  }
  e.kept.push_back(Kept{std::string(channel), message});
  return true;
}

size_t Relay::connections(const std::string& id) const {
  auto it = kernels_.find(id);
  return it == kernels_.end() ? 0 : it->second.clients.size();
}

std::string Relay::last_activity(const std::string& id) const {
  auto it = kernels_.find(id);
  return it == kernels_.end() ? "" : it->second.last_activity;
}

void Relay::Touch(const std::string& id) { kernels_[id].last_activity = jupyter::IsoNow(); }

void Relay::Restarting(const std::string& id) {
  Entry& e = kernels_[id];
  e.restarting = true;
  e.last_activity = jupyter::IsoNow();
  Status(id, "restarting");
}

void Relay::Restarted(const std::string& id, bool ok) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  it->second.restarting = false;
  it->second.last_activity = jupyter::IsoNow();
  if (!ok) Status(id, "dead");
}

void Relay::Forget(const std::string& id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto clients = std::move(it->second.clients);
  kernels_.erase(it);
  for (auto& [n, client] : clients) client.socket->Close();
}

void Relay::CloseAll() {
  std::vector<std::string> ids;
  for (const auto& [id, e] : kernels_) ids.push_back(id);
  for (const auto& id : ids) Forget(id);
}

void Relay::FromClient(const std::string& id, uint64_t client_id, std::string bytes, bool binary) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto client_it = it->second.clients.find(client_id);
  if (client_it == it->second.clients.end()) return;
  const Client client = client_it->second;  // a copy: the map may change below
  it->second.last_activity = jupyter::IsoNow();
  if (sessions_) sessions_->ClientUsed(id);

  auto parsed = ParseClientFrame(bytes, binary, client.protocol);
  if (!parsed) return Refuse(client, parsed.error().parent, parsed.error().why);
  const Channel channel = parsed->channel;
  jupyter::Message& m = parsed->message;
  const json header = m.header;  // a copy: m is moved into Forward, header is used after

  auto* kernel = sessions_ ? dynamic_cast<session::Kernel*>(sessions_->RuntimeOf(id)) : nullptr;
  if (kernel == nullptr) {
    auto view = sessions_ ? sessions_->Get(id) : session::Outcome<json>();
    if (view && view->value("state", "") == "starting" &&
        it->second.waiting.size() < kMaxPendingRequests &&
        it->second.waiting_bytes + bytes.size() <= kMaxWaitingBytes) {
      it->second.waiting_bytes += bytes.size();
      // Relayed once it is ready (parsed again then: a few microseconds,
      // and nothing half-made is held).
      it->second.waiting.push_back(Pending{client_id, std::move(bytes), binary});
      return;
    }
    return Refuse(client, header, "the kernel is not running");
  }
  const std::string msg_id = header["msg_id"].get<std::string>();
  auto& requests = it->second.requests;
  if (requests.size() >= kMaxPendingRequests) requests.erase(requests.begin());
  requests[msg_id] = client_id;
  if (auto sent = kernel->Forward(channel, std::move(m)); !sent) {
    // Looked up again: a failed send may have ended the kernel, and with it
    // its entry (`it` and `requests` may point at freed memory).
    if (auto again = kernels_.find(id); again != kernels_.end())
      again->second.requests.erase(msg_id);
    Refuse(client, header, "the message could not be sent: " + sent.error().message());
  }
}

void Relay::OnKernelMessage(const std::string& id, Channel channel,
                            const jupyter::Message& message) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  Entry& e = it->second;
  e.last_activity = jupyter::IsoNow();
  const std::string_view name = jupyter::ChannelName(channel);
  if (channel == Channel::kIopub) {
    if (message.msg_type() == "status") e.restarting = false;
    if (Keep(e, name, message)) return;
    // Framed once per protocol, not once per client. Copied: a client that
    // goes away while this runs leaves the map.
    std::array<std::optional<ClientFrame>, 2> frames;
    auto clients = e.clients;
    for (auto& [n, client] : clients) {
      auto& frame = frames[client.protocol == Protocol::kV1 ? 1 : 0];
      if (!frame) frame = FrameForClient(name, message, client.protocol);
      Deliver(client, *frame, message);
    }
    return;
  }
  // A reply (or an input request) goes to the client whose request it answers.
  const std::string parent = message.parent_msg_id();
  auto r = e.requests.find(parent);
  if (r == e.requests.end()) return;  // not a client's (the daemon's own, or forgotten)
  if (r->second == kLeft) {
    (void)Keep(e, name, message);
    if (message.msg_type().ends_with("_reply")) e.requests.erase(r);
    return;
  }
  auto client = e.clients.find(r->second);
  if (message.msg_type().ends_with("_reply")) e.requests.erase(r);
  if (client == e.clients.end()) return;
  const Client to = client->second;
  Deliver(to, FrameForClient(name, message, to.protocol), message);
}

void Relay::OnKernelReady(const std::string& id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto waiting = std::move(it->second.waiting);
  it->second.waiting.clear();
  it->second.waiting_bytes = 0;
  for (auto& p : waiting) FromClient(id, p.client, std::move(p.bytes), p.binary);
}

void Relay::OnKernelEnded(const std::string& id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end() || it->second.restarting) return;
  it->second.last_activity = jupyter::IsoNow();
  Status(id, "dead");
}

void Relay::OnKernelDropped(const std::string& id, Channel channel, const std::string& why) {
  api::Log(
      "error", "kernel_message_dropped",
      {{"session_id", id}, {"channel", std::string(jupyter::ChannelName(channel))}, {"why", why}});
}

void Relay::OnKernelReset(const std::string& id, Channel channel, const std::string& why) {
  api::Log(
      "warning", "kernel_connection_reset",
      {{"session_id", id}, {"channel", std::string(jupyter::ChannelName(channel))}, {"why", why}});
  // Every client is told: what it was waiting for may have been lost.
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto clients = it->second.clients;
  for (auto& [n, client] : clients) Refuse(client, json::object(), why);
}

void Relay::Deliver(const Client& client, ClientFrame frame, const jupyter::Message& m) {
  if (frame.bytes.size() > max_message_) {
    return Refuse(client, m.parent_header,
                  "a " + m.msg_type() + " message of " + std::to_string(frame.bytes.size()) +
                      " bytes is over the limit of " + std::to_string(max_message_) +
                      " bytes (--max-message-size); it was not sent");
  }
  Send(*client.socket, std::move(frame));
}

void Relay::Refuse(const Client& client, const json& parent, const std::string& why) {
  jupyter::Message m =
      Made("error", parent, {{"ename", "CordonRelayError"}, {"evalue", why}, {"traceback", {why}}});
  Send(*client.socket, FrameForClient("iopub", m, client.protocol));
}

void Relay::Status(const std::string& id, const std::string& state) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  const jupyter::Message m = Made("status", json::object(), {{"execution_state", state}});
  std::array<std::optional<ClientFrame>, 2> frames;
  auto clients = it->second.clients;
  for (auto& [n, client] : clients) {
    auto& frame = frames[client.protocol == Protocol::kV1 ? 1 : 0];
    if (!frame) frame = FrameForClient("iopub", m, client.protocol);
    Send(*client.socket, *frame);
  }
}

}  // namespace cordon::gateway
