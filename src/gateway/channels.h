// GET /api/kernels/{id}/channels: the WebSocket relay between clients and a
// kernel, as Jupyter servers speak it. Each text frame is one JSON message
// {"channel", "header", "parent_header", "metadata", "content", "buffers"};
// from clients, a missing channel means shell, and buffers, metadata and
// header.date may be missing. Messages to clients also carry top-level
// "msg_id" and "msg_type". Every client of a kernel sees its iopub stream;
// replies on shell, control and stdin go to the client whose request they
// answer. Nothing is rate-limited or dropped: a message over the size limit
// is refused, and the client gets an `error` message saying so (with the
// refused message's parent), never a cut one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/http.h"
#include "session/kernel.h"
#include "session/sessions.h"

namespace cordon::gateway {

class Relay final : public session::KernelListener {
 public:
  explicit Relay(uint64_t max_message) : max_message_(max_message) {}
  void Attach(session::Sessions& sessions) { sessions_ = &sessions; }

  // A new client of kernel `id` (its session id).
  void Connect(const std::string& id, std::shared_ptr<api::WebSocket> socket);
  size_t connections(const std::string& id) const;
  // When the kernel last did or was asked something (ISO 8601), or "".
  std::string last_activity(const std::string& id) const;
  void Touch(const std::string& id);
  // A restart begins: clients get `status: restarting`, not `dead`.
  void Restarting(const std::string& id);
  // The kernel was deleted: its clients are disconnected.
  void Forget(const std::string& id);
  // The daemon stops: every client is disconnected.
  void CloseAll();

  void OnKernelMessage(const std::string& id, jupyter::Channel channel,
                       const jupyter::Message& message) override;
  void OnKernelReady(const std::string& id) override;
  void OnKernelEnded(const std::string& id) override;
  void OnKernelDropped(const std::string& id, jupyter::Channel channel,
                       const std::string& why) override;
  void OnKernelReset(const std::string& id, jupyter::Channel channel,
                     const std::string& why) override;

 private:
  struct Entry {
    std::map<uint64_t, std::shared_ptr<api::WebSocket>> clients;
    std::map<std::string, uint64_t> requests;  // msg_id -> client that sent it
    // Sent while the kernel was starting (or restarting): relayed once it
    // is ready, in order.
    std::vector<std::pair<uint64_t, std::string>> waiting;
    size_t waiting_bytes = 0;  // of `waiting`: bounded (kMaxWaitingBytes)
    std::string last_activity;
    bool restarting = false;
  };
  void FromClient(const std::string& id, uint64_t client, const std::string& text);
  // Sends `message` to one client, or refuses it there when it is too large.
  void Deliver(api::WebSocket& socket, const std::string& channel, const jupyter::Message& message);
  void Status(const std::string& id, const std::string& state);
  void Refuse(api::WebSocket& socket, const nlohmann::json& parent, const std::string& why);

  uint64_t max_message_;
  session::Sessions* sessions_ = nullptr;
  std::map<std::string, Entry> kernels_;
  uint64_t next_client_ = 1;
};

}  // namespace cordon::gateway
