#include "gateway/channels.h"

#include "api/log.h"
#include "gateway/client_message.h"
#include "jupyter/wire.h"
#include "sys/json_text.h"

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

json Header(const std::string& msg_type) {
  return {{"msg_id", jupyter::NewUuid()}, {"msg_type", msg_type},      {"session", "cordon"},
          {"username", "cordon"},         {"date", jupyter::IsoNow()}, {"version", "5.3"}};
}

}  // namespace

void Relay::Connect(const std::string& id, std::shared_ptr<api::WebSocket> socket) {
  const uint64_t n = next_client_++;
  Entry& e = kernels_[id];
  e.clients[n] = socket;
  e.last_activity = jupyter::IsoNow();
  api::WebSocket::Handlers handlers;
  handlers.message = [this, id, n](std::string text) { FromClient(id, n, text); };
  handlers.closed = [this, id, n] {
    auto it = kernels_.find(id);
    if (it == kernels_.end()) return;
    it->second.clients.erase(n);
    std::erase_if(it->second.requests, [n](const auto& r) { return r.second == n; });
  };
  socket->Start(std::move(handlers));
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
  kernels_[id].restarting = true;
  Status(id, "restarting");
}

void Relay::Forget(const std::string& id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto clients = std::move(it->second.clients);
  kernels_.erase(it);
  for (auto& [n, socket] : clients) socket->Close();
}

void Relay::CloseAll() {
  std::vector<std::string> ids;
  for (const auto& [id, e] : kernels_) ids.push_back(id);
  for (const auto& id : ids) Forget(id);
}

void Relay::FromClient(const std::string& id, uint64_t client, const std::string& text) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto socket_it = it->second.clients.find(client);
  if (socket_it == it->second.clients.end()) return;
  std::shared_ptr<api::WebSocket> socket = socket_it->second;
  it->second.last_activity = jupyter::IsoNow();

  auto parsed = ParseClientMessage(text);
  if (!parsed) return Refuse(*socket, parsed.error().parent, parsed.error().why);
  const Channel channel = parsed->channel;
  jupyter::Message& m = parsed->message;
  const json header = m.header;  // a copy: m is moved into Forward, header is used after

  auto* kernel = sessions_ ? dynamic_cast<session::Kernel*>(sessions_->RuntimeOf(id)) : nullptr;
  if (kernel == nullptr) {
    auto view = sessions_ ? sessions_->Get(id) : session::Outcome<json>();
    if (view && view->value("state", "") == "starting" &&
        it->second.waiting.size() < kMaxPendingRequests &&
        it->second.waiting_bytes + text.size() <= kMaxWaitingBytes) {
      it->second.waiting_bytes += text.size();
      it->second.waiting.emplace_back(client, text);  // relayed once it is ready
      return;
    }
    return Refuse(*socket, header, "the kernel is not running");
  }
  const std::string msg_id = header["msg_id"].get<std::string>();
  auto& requests = it->second.requests;
  if (requests.size() >= kMaxPendingRequests) requests.erase(requests.begin());
  requests[msg_id] = client;
  if (auto sent = kernel->Forward(channel, std::move(m)); !sent) {
    // Looked up again: a failed send may have ended the kernel, and with it
    // its entry (`it` and `requests` may point at freed memory).
    if (auto again = kernels_.find(id); again != kernels_.end())
      again->second.requests.erase(msg_id);
    Refuse(*socket, header, "the message could not be sent: " + sent.error().message());
  }
}

void Relay::OnKernelMessage(const std::string& id, Channel channel,
                            const jupyter::Message& message) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  Entry& e = it->second;
  e.last_activity = jupyter::IsoNow();
  const std::string name(jupyter::ChannelName(channel));
  if (channel == Channel::kIopub) {
    if (message.msg_type() == "status") e.restarting = false;
    // Copied: a client that goes away while this runs leaves the map.
    auto clients = e.clients;
    for (auto& [n, socket] : clients) Deliver(*socket, name, message);
    return;
  }
  // A reply (or an input request) goes to the client whose request it answers.
  const std::string parent = message.parent_msg_id();
  auto r = e.requests.find(parent);
  if (r == e.requests.end()) return;  // not a client's (the daemon's own, or forgotten)
  auto client = e.clients.find(r->second);
  if (message.msg_type().ends_with("_reply")) e.requests.erase(r);
  if (client == e.clients.end()) return;
  std::shared_ptr<api::WebSocket> socket = client->second;
  Deliver(*socket, name, message);
}

void Relay::OnKernelReady(const std::string& id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  auto waiting = std::move(it->second.waiting);
  it->second.waiting.clear();
  it->second.waiting_bytes = 0;
  for (auto& [client, text] : waiting) FromClient(id, client, text);
}

void Relay::OnKernelEnded(const std::string& id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end() || it->second.restarting) return;
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
  for (auto& [n, socket] : clients) Refuse(*socket, json::object(), why);
}

void Relay::Deliver(api::WebSocket& socket, const std::string& channel, const jupyter::Message& m) {
  json out = {
      {"channel", channel},     {"header", m.header},      {"parent_header", m.parent_header},
      {"metadata", m.metadata}, {"content", m.content},    {"buffers", json::array()},
      {"msg_id", m.msg_id()},   {"msg_type", m.msg_type()}};
  std::string text = sys::JsonText(out);
  if (text.size() > max_message_) {
    return Refuse(socket, m.parent_header,
                  "a " + m.msg_type() + " message of " + std::to_string(text.size()) +
                      " bytes is over the limit of " + std::to_string(max_message_) +
                      " bytes (--max-message-size); it was not sent");
  }
  if (!m.buffers.empty()) {
    api::Log("warning", "buffers_not_relayed",
             {{"msg_type", m.msg_type()}, {"buffers", m.buffers.size()}});
  }
  socket.Send(std::move(text));
}

void Relay::Refuse(api::WebSocket& socket, const json& parent, const std::string& why) {
  json header = Header("error");
  json out = {{"channel", "iopub"},
              {"header", header},
              {"parent_header", parent.is_object() ? parent : json::object()},
              {"metadata", json::object()},
              {"content", {{"ename", "CordonRelayError"}, {"evalue", why}, {"traceback", {why}}}},
              {"buffers", json::array()},
              {"msg_id", header["msg_id"]},
              {"msg_type", "error"}};
  socket.Send(sys::JsonText(out));
}

void Relay::Status(const std::string& id, const std::string& state) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  json header = Header("status");
  json out = {{"channel", "iopub"},
              {"header", header},
              {"parent_header", json::object()},
              {"metadata", json::object()},
              {"content", {{"execution_state", state}}},
              {"buffers", json::array()},
              {"msg_id", header["msg_id"]},
              {"msg_type", "status"}};
  std::string text = sys::JsonText(out);
  auto clients = it->second.clients;
  for (auto& [n, socket] : clients) socket->Send(text);
}

}  // namespace cordon::gateway
