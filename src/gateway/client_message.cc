#include "gateway/client_message.h"

#include <optional>

namespace cordon::gateway {
namespace {

using jupyter::Channel;
using nlohmann::json;

std::optional<Channel> ParseChannel(const std::string& name) {
  if (name == "shell") return Channel::kShell;
  if (name == "control") return Channel::kControl;
  if (name == "stdin") return Channel::kStdin;
  if (name == "iopub") return Channel::kIopub;
  return std::nullopt;
}

std::unexpected<ClientRefusal> Refusal(json parent, std::string why) {
  return std::unexpected(ClientRefusal{std::move(parent), std::move(why)});
}

}  // namespace

std::expected<ClientMessage, ClientRefusal> ParseClientMessage(const std::string& text) {
  json in = json::parse(text, nullptr, false);
  if (in.is_discarded() || !in.is_object()) {
    return Refusal(json::object(), "the message is not a JSON object");
  }
  json header = in.contains("header") ? in["header"] : json();
  if (!header.is_object() || !header.contains("msg_type") || !header["msg_type"].is_string()) {
    return Refusal(json::object(), "header: must be an object with a msg_type");
  }
  // Not in.value("channel", "shell"): that throws when the channel is not a
  // string (a duplicate key may make it an object), and a client's frame
  // must never throw out of the relay.
  if (in.contains("channel") && !in["channel"].is_string()) {
    return Refusal(header, "channel: must be a string: shell, control or stdin");
  }
  const std::string channel_name = in.value("channel", "shell");
  auto channel = ParseChannel(channel_name);
  if (!channel || *channel == Channel::kIopub) {
    return Refusal(header, "channel: \"" + channel_name + "\" is not shell, control or stdin");
  }
  if (in.contains("buffers") && in["buffers"].is_array() && !in["buffers"].empty()) {
    return Refusal(header, "buffers: binary buffers are not relayed over text frames; send none");
  }
  ClientMessage out;
  out.channel = *channel;
  jupyter::Message& m = out.message;
  if (!header.contains("msg_id") || !header["msg_id"].is_string()) {
    header["msg_id"] = jupyter::NewUuid();
  }
  if (!header.contains("date")) header["date"] = jupyter::IsoNow();
  if (!header.contains("session")) header["session"] = "";
  if (!header.contains("username")) header["username"] = "";
  if (!header.contains("version")) header["version"] = "5.3";
  m.header = header;
  auto object_or_empty = [&](const char* key) {
    return in.contains(key) && in[key].is_object() ? in[key] : json::object();
  };
  m.parent_header = object_or_empty("parent_header");
  m.metadata = object_or_empty("metadata");
  m.content = object_or_empty("content");
  return out;
}

}  // namespace cordon::gateway
