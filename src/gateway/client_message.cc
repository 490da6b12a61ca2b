#include "gateway/client_message.h"

#include <optional>
#include <utility>
#include <vector>

#include "sys/json_text.h"

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

// The rules every frame's message is held to, once it is a JSON object
// (`in`) and its buffers; `in`'s "buffers" is not looked at.
std::expected<ClientMessage, ClientRefusal> FromObject(json in,
                                                       std::vector<std::string_view> buffers) {
  json header = in.contains("header") ? std::move(in["header"]) : json();
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
  m.header = std::move(header);
  auto object_or_empty = [&](const char* key) {
    return in.contains(key) && in[key].is_object() ? std::move(in[key]) : json::object();
  };
  m.parent_header = object_or_empty("parent_header");
  m.metadata = object_or_empty("metadata");
  m.content = object_or_empty("content");
  m.buffers.reserve(buffers.size());
  for (std::string_view b : buffers) m.buffers.emplace_back(b);
  return out;
}

std::expected<ClientMessage, ClientRefusal> ParseBinaryJson(std::string_view bytes) {
  auto frame = jupyter::DecodeBinaryJson(bytes);
  if (!frame) return Refusal(json::object(), "binary frame: " + frame.error());
  json in = json::parse(frame->json, nullptr, false);
  if (in.is_discarded() || !in.is_object()) {
    return Refusal(json::object(), "binary frame: its first part is not a JSON object");
  }
  return FromObject(std::move(in), std::move(frame->buffers));
}

std::expected<ClientMessage, ClientRefusal> ParseV1(std::string_view bytes) {
  auto frame = jupyter::DecodeV1(bytes);
  if (!frame)
    return Refusal(json::object(), "v1.kernel.websocket.jupyter.org frame: " + frame.error());
  static constexpr const char* kNames[] = {"header", "parent_header", "metadata", "content"};
  json in = json::object();
  in["channel"] = std::string(frame->channel);
  for (size_t i = 0; i < 4; ++i) {
    json part = json::parse(frame->parts[i], nullptr, false);
    if (part.is_discarded()) {
      // The header, once it is known, is the error's parent.
      json parent = i > 0 && in["header"].is_object() ? in["header"] : json::object();
      return Refusal(std::move(parent), std::string(kNames[i]) + ": not valid JSON (part " +
                                            std::to_string(i + 1) + " of the v1 frame)");
    }
    in[kNames[i]] = std::move(part);
  }
  return FromObject(std::move(in), std::move(frame->buffers));
}

}  // namespace

Protocol ProtocolOf(std::string_view subprotocol) {
  return subprotocol == jupyter::kWsProtocolV1 ? Protocol::kV1 : Protocol::kDefault;
}

std::expected<ClientMessage, ClientRefusal> ParseClientMessage(const std::string& text) {
  json in = json::parse(text, nullptr, false);
  if (in.is_discarded() || !in.is_object()) {
    return Refusal(json::object(), "the message is not a JSON object");
  }
  if (in.contains("buffers") && in["buffers"].is_array() && !in["buffers"].empty()) {
    json header = in.contains("header") && in["header"].is_object() &&
                          in["header"].contains("msg_type") && in["header"]["msg_type"].is_string()
                      ? in["header"]
                      : json::object();
    return Refusal(std::move(header),
                   "buffers: a text frame cannot carry binary buffers; send a message with "
                   "buffers as a binary frame (the binary form of the default protocol, or "
                   "v1.kernel.websocket.jupyter.org)");
  }
  return FromObject(std::move(in), {});
}

std::expected<ClientMessage, ClientRefusal> ParseClientFrame(std::string_view bytes, bool binary,
                                                             Protocol protocol) {
  if (!binary) return ParseClientMessage(std::string(bytes));
  return protocol == Protocol::kV1 ? ParseV1(bytes) : ParseBinaryJson(bytes);
}

ClientFrame FrameForClient(std::string_view channel, const jupyter::Message& m, Protocol protocol) {
  const std::string header = sys::JsonText(m.header), parent = sys::JsonText(m.parent_header),
                    metadata = sys::JsonText(m.metadata), content = sys::JsonText(m.content);
  if (protocol == Protocol::kV1) {
    return {jupyter::EncodeV1(channel, {header, parent, metadata, content}, m.buffers), true};
  }
  // Written field by field rather than as one json object, which would
  // deep-copy the four parts first (allocations and frees for every node of
  // every relayed message). The keys come in the order the object form
  // dumped them (sorted: nlohmann's objects are std::maps), so the text is
  // the same byte for byte.
  const std::string name = sys::JsonText(json(std::string(channel))),
                    msg_id = sys::JsonText(json(m.msg_id())),
                    msg_type = sys::JsonText(json(m.msg_type()));
  const std::pair<std::string_view, std::string_view> fields[] = {
      {"channel", name},  {"content", content},   {"header", header},       {"metadata", metadata},
      {"msg_id", msg_id}, {"msg_type", msg_type}, {"parent_header", parent}};
  const bool text = m.buffers.empty();
  std::string out = text ? R"({"buffers":[])" : "{";
  for (const auto& [key, value] : fields) {
    if (out.size() > 1) out += ',';
    out += '"';
    out += key;
    out += "\":";
    out += value;
  }
  out += '}';
  if (text) return {std::move(out), false};
  return {jupyter::EncodeBinaryJson(out, m.buffers), true};
}

}  // namespace cordon::gateway
