// The Jupyter messaging protocol's wire format (v5.x): a multipart message
//   [identities..., "<IDS|MSG>", signature, header, parent_header, metadata,
//    content, buffers...]
// signed with HMAC-SHA256 over header, parent_header, metadata and content.
// Every message from a kernel is verified (constant-time comparison) before
// anything in it is believed.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::jupyter {

struct Message {
  std::vector<std::string> identities;  // routing prefix (ROUTER/DEALER)
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json parent_header = nlohmann::json::object();
  nlohmann::json metadata = nlohmann::json::object();
  nlohmann::json content = nlohmann::json::object();
  std::vector<std::string> buffers;

  std::string msg_type() const;
  std::string msg_id() const;
  std::string parent_msg_id() const;
};

// HMAC-SHA256 of the parts, as lowercase hex; empty key: no signature ("").
std::string Sign(std::string_view key, const std::vector<std::string_view>& parts);

// The frames to send.
std::vector<std::string> Serialize(const Message& message, std::string_view key);

// Parses and verifies received frames. The error says why a message was
// dropped (no delimiter, bad signature, invalid JSON).
std::expected<Message, std::string> Parse(const std::vector<std::string>& frames,
                                          std::string_view key);

// A new message: header with a fresh msg_id, `session`, `msg_type`, the
// current time and version 5.3; `parent` (may be null) as parent_header.
Message NewMessage(std::string_view session, std::string_view msg_type, nlohmann::json content,
                   const Message* parent = nullptr);

// A random UUID (version 4), lowercase.
std::string NewUuid();

// Now, as ISO 8601 UTC with microseconds ("2026-11-29T23:40:00.123456Z").
std::string IsoNow();

}  // namespace cordon::jupyter
