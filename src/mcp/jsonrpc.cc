#include "mcp/jsonrpc.h"

namespace cordon::mcp {

using nlohmann::json;

namespace {

std::unexpected<RpcError> Invalid(std::string message, json id = nullptr) {
  return std::unexpected(RpcError{kInvalidRequest, std::move(message), std::move(id)});
}

// JSON-RPC allows a number or a string (null is discouraged; MCP forbids
// it). MCP further rules out fractional numbers.
bool ValidId(const json& id) { return id.is_string() || id.is_number_integer(); }

}  // namespace

std::expected<Message, RpcError> Parse(std::string_view text) {
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return std::unexpected(RpcError{kParseError, "parse error: the message is not valid JSON"});
  }
  return Validate(value);
}

std::expected<Message, RpcError> Validate(const json& value) {
  if (value.is_array()) {
    return Invalid("batches (a JSON array of messages) are not supported: send one message");
  }
  if (!value.is_object()) return Invalid("a message must be a JSON object");
  // The id first, so that the errors below can carry it.
  json id = nullptr;
  const bool has_id = value.contains("id");
  if (has_id) {
    if (!ValidId(value["id"])) return Invalid("id: must be a string or an integer");
    id = value["id"];
  }
  if (!value.contains("jsonrpc") || value["jsonrpc"] != "2.0") {
    return Invalid("jsonrpc: must be \"2.0\"", id);
  }
  Message m;
  m.id = id;
  if (value.contains("method")) {
    if (!value["method"].is_string()) return Invalid("method: must be a string", id);
    m.method = value["method"].get<std::string>();
    if (value.contains("result") || value.contains("error")) {
      return Invalid("a request has a method and no result or error", id);
    }
    if (value.contains("params") && !value["params"].is_null()) {
      // MCP's params are always an object (JSON-RPC also allows an array).
      if (!value["params"].is_object()) {
        return std::unexpected(RpcError{kInvalidParams, "params: must be an object", id});
      }
      m.params = value["params"];
    }
    m.kind = has_id ? Message::Kind::kRequest : Message::Kind::kNotification;
    return m;
  }
  const bool result = value.contains("result"), error = value.contains("error");
  if (result == error) {
    return Invalid("a message needs a method (a request), or exactly one of result and error", id);
  }
  if (!has_id) return Invalid("id: a response needs the id of its request");
  m.kind = Message::Kind::kResponse;
  m.result = result ? value["result"] : value["error"];
  return m;
}

json Response(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json ErrorResponse(const RpcError& error) {
  json e = {{"code", error.code}, {"message", error.message}};
  if (!error.data.is_null()) e["data"] = error.data;
  return {{"jsonrpc", "2.0"}, {"id", error.id}, {"error", std::move(e)}};
}

json Notification(const std::string& method, json params) {
  json n = {{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.is_null()) n["params"] = std::move(params);
  return n;
}

}  // namespace cordon::mcp
