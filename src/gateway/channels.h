// GET /api/kernels/{id}/channels: the WebSocket relay between clients and a
// kernel, as Jupyter servers speak it, in either protocol
// (client_message.h): JSON text frames and their binary form for messages
// with buffers, or `v1.kernel.websocket.jupyter.org` when the client offers
// it. Buffers go both ways. Messages to clients also carry top-level
// "msg_id" and "msg_type" (default protocol). Every client of a kernel sees
// its iopub stream; replies on shell, control and stdin (input_request
// too) go to the client whose request they answer. What the daemon says
// itself (a `status` of `restarting` or `dead`, an `error` of the relay) is
// a whole Jupyter message, framed like the kernel's. Nothing is
// rate-limited or dropped: a message over the size limit is refused, and
// the client gets an `error` message saying so (with the refused message's
// parent), never a cut one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/http.h"
#include "gateway/client_message.h"
#include "session/kernel.h"
#include "session/sessions.h"

namespace cordon::gateway {

class Relay final : public session::KernelListener {
 public:
  explicit Relay(uint64_t max_message) : max_message_(max_message) {}
  void Attach(session::Sessions& sessions) { sessions_ = &sessions; }

  // A new client of kernel `id` (its session id); `client_session` is the
  // client's own session id (the channels URL's ?session_id=), "" if none.
  // When the last client of a kernel leaves, what the kernel sends until
  // the next one connects is kept (its iopub up to kMaxKeptBytes, the
  // replies to its requests whole): replayed, in order, to a client of the
  // same session id (a reconnect, as Jupyter servers replay it), and
  // dropped for another.
  void Connect(const std::string& id, std::shared_ptr<api::WebSocket> socket,
               std::string client_session = "");
  size_t connections(const std::string& id) const;
  // When the kernel last did or was asked something (ISO 8601), or "".
  std::string last_activity(const std::string& id) const;
  void Touch(const std::string& id);
  // A restart begins: clients get `status: restarting`, not `dead`.
  void Restarting(const std::string& id);
  // The restart is over: the kernel is ready again, or it failed (then its
  // clients get `status: dead`).
  void Restarted(const std::string& id, bool ok);
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
  struct Client {
    std::shared_ptr<api::WebSocket> socket;
    Protocol protocol = Protocol::kDefault;  // agreed at its handshake
    std::string session;                     // its ?session_id=
  };
  // A kernel's message kept for a client that left (Connect).
  struct Kept {
    std::string channel;
    jupyter::Message message;
  };
  struct Pending {  // a client's frame, held while the kernel starts
    uint64_t client = 0;
    std::string bytes;
    bool binary = false;
  };
  struct Entry {
    std::map<uint64_t, Client> clients;
    std::map<std::string, uint64_t> requests;  // msg_id -> client that sent it
    // Sent while the kernel was starting (or restarting): relayed once it
    // is ready, in order.
    std::vector<Pending> waiting;
    size_t waiting_bytes = 0;  // of `waiting`: bounded (kMaxWaitingBytes)
    std::string last_activity;
    bool restarting = false;
    // The last client left with this session id: what the kernel sends
    // meanwhile is kept for its return (requests of kLeft are its).
    std::optional<std::string> left_session;
    std::vector<Kept> kept;
    size_t kept_bytes = 0;
  };
  // The client number that the requests of a client who left carry.
  static constexpr uint64_t kLeft = 0;
  // Keeps `message` for the client who left, if one is awaited (iopub past
  // the bound is dropped instead); false when none is.
  bool Keep(Entry& e, std::string_view channel, const jupyter::Message& message);
  void FromClient(const std::string& id, uint64_t client, std::string bytes, bool binary);
  // Sends a framed message to one client, or refuses it there when it is
  // too large (`m` is the message, for the refusal).
  void Deliver(const Client& client, ClientFrame frame, const jupyter::Message& m);
  // A message the daemon makes up, to every client of `id`.
  void Status(const std::string& id, const std::string& state);
  void Refuse(const Client& client, const nlohmann::json& parent, const std::string& why);

  uint64_t max_message_;
  session::Sessions* sessions_ = nullptr;
  std::map<std::string, Entry> kernels_;
  uint64_t next_client_ = 1;
};

}  // namespace cordon::gateway
