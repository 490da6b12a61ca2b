// The frames of a Jupyter kernel websocket, both ways, as Relay speaks
// them: a client's frame parsed into a message for the kernel, and a
// kernel's (or the daemon's) message framed for a client, in the protocol
// its connection agreed (jupyter/ws_framing.h has the bytes). Pure (no
// socket, no kernel), so that the fuzz target
// (fuzz/gateway_client_message.cc) reaches exactly what the relay runs on a
// client's bytes.
//
// A message is {"channel", "header", "parent_header", "metadata",
// "content", "buffers"}; from clients, a missing channel means shell, and
// buffers, metadata and header.date may be missing.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "jupyter/connection.h"
#include "jupyter/wire.h"
#include "jupyter/ws_framing.h"

namespace cordon::gateway {

// How one connection frames its messages: the subprotocol it agreed.
enum class Protocol {
  kDefault,  // none: JSON text frames, and the binary form for buffers
  kV1,       // v1.kernel.websocket.jupyter.org: binary frames only
};
Protocol ProtocolOf(std::string_view subprotocol);

struct ClientMessage {
  jupyter::Channel channel = jupyter::Channel::kShell;
  // header with the defaults filled in: a fresh msg_id unless a string one
  // was given, date, session, username and version; buffers as sent.
  jupyter::Message message;
};

// Why a frame is refused, and the parent the `error` reply carries (the
// client's header once it is known to be an object with a msg_type, else {}).
struct ClientRefusal {
  nlohmann::json parent = nlohmann::json::object();
  std::string why;
};

// A text frame: one JSON message. A missing channel means shell; iopub and
// unknown channels, buffers (a text frame cannot carry binary ones) and a
// header without a string msg_type are refused. parent_header, metadata and
// content that are not objects become {}.
std::expected<ClientMessage, ClientRefusal> ParseClientMessage(const std::string& text);

// Any frame: a text one as above (in either protocol); a binary one in the
// connection's protocol (the default's binary form, or v1), whose buffers
// the message then carries. The same rules; a frame whose counts or
// offsets do not fit it is refused, saying where.
std::expected<ClientMessage, ClientRefusal> ParseClientFrame(std::string_view bytes, bool binary,
                                                             Protocol protocol);

// A message for a client on `channel`. Default protocol: a JSON text frame
// (with top-level "msg_id" and "msg_type" too, and "buffers": []), or, when
// the message has buffers, the binary form of the same object without
// "buffers". v1: a binary frame.
struct ClientFrame {
  std::string bytes;
  bool binary = false;
};
ClientFrame FrameForClient(std::string_view channel, const jupyter::Message& message,
                           Protocol protocol);

}  // namespace cordon::gateway
