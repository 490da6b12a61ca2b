// JSON-RPC 2.0 messages as MCP carries them (one JSON object per message:
// a line on stdio, a POST body over HTTP). This layer checks only the
// envelope; what a method's params mean is the server's (server.h).
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cordon::mcp {

// The codes JSON-RPC 2.0 defines (section 5.1).
inline constexpr int kParseError = -32700;      // not JSON
inline constexpr int kInvalidRequest = -32600;  // JSON, but not a JSON-RPC message
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;  // MCP: also an unknown tool
inline constexpr int kInternalError = -32603;

struct RpcError {
  int code = kInternalError;
  std::string message;
  // The id of the request at fault when it could be read; null otherwise
  // (JSON-RPC: the response to an unreadable request has id null).
  nlohmann::json id = nullptr;
  // The error object's optional `data` (null: none), such as the versions
  // an UnsupportedProtocolVersionError lists.
  nlohmann::json data = nullptr;
};

struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  nlohmann::json id;      // a request's or response's: a string or an integer
  std::string method;     // a request's or notification's
  nlohmann::json params;  // an object, or null when absent
  nlohmann::json result;  // a response's (or its error object)
};

// One message from its text. Batches (a JSON array) are refused with
// kInvalidRequest: MCP 2025-06-18 and later have none, and cordon does not
// serve 2025-03-26's.
std::expected<Message, RpcError> Parse(std::string_view text);
// The same for an already parsed value.
std::expected<Message, RpcError> Validate(const nlohmann::json& value);

nlohmann::json Response(const nlohmann::json& id, nlohmann::json result);
nlohmann::json ErrorResponse(const RpcError& error);
nlohmann::json Notification(const std::string& method, nlohmann::json params);

}  // namespace cordon::mcp
