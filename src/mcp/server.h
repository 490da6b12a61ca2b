// The MCP server over one Engine, for any transport: the lifecycle
// (initialize, with the protocol version negotiated; the initialized
// notification; ping) and the tools (tools/list, tools/call over the one
// table of tools.h). A transport hands it each message with the state of
// the connection it came on; it answers requests through a callback,
// at once or later (a run).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "mcp/jsonrpc.h"
#include "mcp/tools.h"

namespace cordon::mcp {

// The versions served, newest first. initialize answers the client's own
// when it is one of them, else the newest (the client then decides).
inline constexpr std::string_view kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
bool SupportedVersion(std::string_view version);

// One client's lifecycle: a stdio connection, or an Mcp-Session-Id.
struct Connection {
  bool initialize_answered = false;  // initialize succeeded once
  bool initialized = false;          // notifications/initialized came
  std::string protocol_version;      // negotiated
  nlohmann::json client_info;
};

class Server final {
 public:
  // `engine` must outlive the server.
  explicit Server(Engine engine) : engine_(std::move(engine)) {}

  using Reply = std::function<void(nlohmann::json response)>;

  // One message of `connection`. A request gets exactly one response
  // through `reply` (maybe before Handle returns, maybe later: the
  // connection is not used after Handle returns); a notification and a
  // response get none.
  void Handle(Connection& connection, const Message& message, Reply reply);
  // The same from a message's text: a message that does not parse gets its
  // error response (-32700, -32600).
  void HandleText(Connection& connection, std::string_view text, Reply reply);

  Engine& engine() { return engine_; }

 private:
  void Initialize(Connection& connection, const Message& message, const Reply& reply);
  void CallTool(const Message& message, Reply reply);

  Engine engine_;
};

}  // namespace cordon::mcp
