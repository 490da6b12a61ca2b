// The MCP server over one Engine, for any transport: the lifecycle
// (initialize, with the protocol version negotiated; the initialized
// notification; ping), the tools (tools/list, tools/call over the one
// table of tools.h), progress and cancellation of a call, and logging
// (logging/setLevel, notifications/message). A transport hands it each
// message with the state of the connection it came on; it answers
// requests through a callback, at once or later (a run), and sends the
// notifications a request causes through another.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "mcp/jsonrpc.h"
#include "mcp/tools.h"

namespace cordon::mcp {

// The versions served, newest first. initialize answers the client's own
// when it is one of them, else the newest (the client then decides).
inline constexpr std::string_view kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
bool SupportedVersion(std::string_view version);

// The severities of notifications/message (RFC 5424's, as MCP names
// them), least severe first; LogLevel gives the index, -1 for no such name.
inline constexpr std::string_view kLogLevels[] = {"debug", "info",     "notice", "warning",
                                                  "error", "critical", "alert",  "emergency"};
int LogLevel(std::string_view name);

// A progress notification at least this often while a call with a
// progressToken lasts (the issue asks for 5 s; a client's request timeout
// with resetTimeoutOnProgress may be as short as twice this).
inline constexpr std::chrono::milliseconds kProgressEvery{2000};

class ToolCall;

// What of a connection outlives the handling of one message: its calls in
// flight, the sessions its tools created, the level it logs at.
struct ConnectionState {
  std::map<std::string, std::weak_ptr<ToolCall>> calls;  // by the request id's JSON text
  std::set<std::string> sessions;                        // created, not yet closed
  // None until logging/setLevel asks (std::size(kLogLevels): nothing).
  int log_level = static_cast<int>(std::size(kLogLevels));
};

// One client's lifecycle: a stdio connection, or an Mcp-Session-Id.
struct Connection {
  bool initialize_answered = false;  // initialize succeeded once
  bool initialized = false;          // notifications/initialized came
  std::string protocol_version;      // negotiated
  nlohmann::json client_info;
  std::shared_ptr<ConnectionState> state = std::make_shared<ConnectionState>();
};

class Server final {
 public:
  // `engine` must outlive the server.
  explicit Server(Engine engine) : engine_(std::move(engine)) {}

  // A response, or null: the request was cancelled and no response is owed
  // (a transport that must still end something, an HTTP POST, ends it).
  using Reply = std::function<void(nlohmann::json response)>;
  // A notification that belongs with a request (its progress, the events it
  // caused): over HTTP it goes on that request's POST stream.
  using Notify = std::function<void(nlohmann::json notification)>;

  // One message of `connection`. A request gets exactly one call of
  // `reply` (maybe before Handle returns, maybe later: the connection is
  // not used after Handle returns, only its shared state); a notification
  // and a response get none. `notify` (may be null: none is sent) is used
  // until the request is answered, and after it for the events of its
  // teardown when the transport still has a way to the client.
  void Handle(Connection& connection, const Message& message, Reply reply, Notify notify = nullptr);
  // The same from a message's text: a message that does not parse gets its
  // error response (-32700, -32600).
  void HandleText(Connection& connection, std::string_view text, Reply reply,
                  Notify notify = nullptr);
  // The connection ends (an MCP session deleted or expired): its calls in
  // flight are cancelled, and the sessions its tools created are closed
  // (verified; the results go to stderr).
  void Close(Connection& connection);

  Engine& engine() { return engine_; }

 private:
  void Initialize(Connection& connection, const Message& message, const Reply& reply);
  void CallTool(Connection& connection, const Message& message, Reply reply, Notify notify);
  void SetLevel(Connection& connection, const Message& message, const Reply& reply);
  void Cancelled(Connection& connection, const Message& message);

  Engine engine_;
};

}  // namespace cordon::mcp
