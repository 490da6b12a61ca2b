// A text frame from a Jupyter websocket client, parsed: the JSON message
// {"channel", "header", "parent_header", "metadata", "content", "buffers"}
// as Relay::FromClient relays it. Pure (no socket, no kernel), so that the
// fuzz target (fuzz/gateway_client_message.cc) reaches exactly what the
// relay runs on a client's bytes.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>

#include "jupyter/connection.h"
#include "jupyter/wire.h"

namespace cordon::gateway {

struct ClientMessage {
  jupyter::Channel channel = jupyter::Channel::kShell;
  // header with the defaults filled in: a fresh msg_id unless a string one
  // was given, date, session, username and version.
  jupyter::Message message;
};

// Why a frame is refused, and the parent the `error` reply carries (the
// client's header once it is known to be an object with a msg_type, else {}).
struct ClientRefusal {
  nlohmann::json parent = nlohmann::json::object();
  std::string why;
};

// A missing channel means shell; iopub and unknown channels, binary buffers
// and a header without a string msg_type are refused. parent_header,
// metadata and content that are not objects become {}.
std::expected<ClientMessage, ClientRefusal> ParseClientMessage(const std::string& text);

}  // namespace cordon::gateway
