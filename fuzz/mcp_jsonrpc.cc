// MCP's JSON-RPC envelope (mcp::Parse): a line of `cordon mcp`'s stdin or
// the body of a POST /mcp, before any method is looked at. Every input is
// either a message whose fields agree with its kind, or an error with a
// JSON-RPC code and a message; both serialize (as the transports write
// them), and what parses parses again, the same, from its own text.
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "mcp/jsonrpc.h"

namespace {

using cordon::mcp::Message;
using nlohmann::json;

// What the transports write: text that never throws on bad UTF-8.
std::string Text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool ValidId(const json& id) { return id.is_string() || id.is_number_integer(); }

// The message as JSON again, from its fields.
json Rebuild(const Message& m) {
  json v = {{"jsonrpc", "2.0"}};
  if (!m.id.is_null()) v["id"] = m.id;
  if (m.kind == Message::Kind::kResponse) {
    // Which of result and error it was is not kept: result is as good.
    v["result"] = m.result;
    return v;
  }
  v["method"] = m.method;
  if (!m.params.is_null()) v["params"] = m.params;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto message = mcp::Parse(fuzz::Text(data, size));
  if (!message) {
    const mcp::RpcError& e = message.error();
    CORDON_FUZZ_CHECK(e.code == mcp::kParseError || e.code == mcp::kInvalidRequest ||
                      e.code == mcp::kInvalidParams);
    CORDON_FUZZ_CHECK(!e.message.empty());
    CORDON_FUZZ_CHECK(e.id.is_null() || ValidId(e.id));
    json response = mcp::ErrorResponse(e);
    CORDON_FUZZ_CHECK(json::parse(Text(response))["error"]["code"] == e.code);
    return 0;
  }
  const Message& m = *message;
  switch (m.kind) {
    case Message::Kind::kRequest:
      CORDON_FUZZ_CHECK(ValidId(m.id));
      break;
    case Message::Kind::kNotification:
      CORDON_FUZZ_CHECK(m.id.is_null());
      break;
    case Message::Kind::kResponse:
      CORDON_FUZZ_CHECK(ValidId(m.id) && m.method.empty());
      break;
  }
  CORDON_FUZZ_CHECK(m.params.is_null() || m.params.is_object());
  // Its own text parses again to the same message. Text that is not UTF-8
  // is replaced on the way out (U+FFFD), so then only the kind must agree;
  // numbers are compared as text (an overflowing one is written null).
  const json rebuilt = Rebuild(m);
  auto again = mcp::Parse(Text(rebuilt));
  CORDON_FUZZ_CHECK(again.has_value() && again->kind == m.kind);
  bool utf8 = true;
  try {
    (void)rebuilt.dump();
  } catch (const json::type_error&) {
    utf8 = false;
  }
  if (utf8) {
    CORDON_FUZZ_CHECK(again->id == m.id && again->method == m.method);
    CORDON_FUZZ_CHECK(Text(again->params) == Text(m.params));
    CORDON_FUZZ_CHECK(Text(again->result) == Text(m.result));
  }
  if (m.kind != Message::Kind::kResponse) {
    (void)Text(mcp::Response(m.id, json::object()));
    (void)Text(mcp::Notification(m.method, m.params));
  }
  return 0;
}
