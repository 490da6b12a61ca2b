// The MCP server over one Engine, for any transport, in both protocol
// eras. Legacy (2025-11-25, -06-18, -03-26): the lifecycle (initialize,
// with the protocol version negotiated; the initialized notification;
// ping), logging/setLevel. Modern (2026-07-28): no handshake; every
// request carries its version and the client's capabilities in
// params._meta, server/discover says what is served, and every result
// carries resultType. Both: the tools (tools/list, tools/call over the one
// table of tools.h), progress and cancellation of a call, and log events
// as notifications/message. A transport hands it each message with the
// state of the connection it came on; it answers requests through a
// callback, at once or later (a run), and sends the notifications a
// request causes through another.
#pragma once

#include <chrono>
#include <expected>
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

// The modern versions served: no initialize, a per-request _meta (the
// 2026-07-28 spec's versioning section). Which era a request is in is read
// from the request itself (ModernRequest), never from the version alone.
inline constexpr std::string_view kModernVersions[] = {"2026-07-28"};
bool ModernVersion(std::string_view version);
// Every version served, modern first: server/discover's supportedVersions
// and an UnsupportedProtocolVersionError's data.supported.
nlohmann::json AllVersions();

// The per-request fields of the modern era, in params._meta.
inline constexpr char kMetaProtocolVersion[] = "io.modelcontextprotocol/protocolVersion";
inline constexpr char kMetaClientCapabilities[] = "io.modelcontextprotocol/clientCapabilities";
inline constexpr char kMetaClientInfo[] = "io.modelcontextprotocol/clientInfo";
inline constexpr char kMetaLogLevel[] = "io.modelcontextprotocol/logLevel";
inline constexpr char kMetaServerInfo[] = "io.modelcontextprotocol/serverInfo";

// The error codes the 2026-07-28 spec allocates (its reserved sub-range).
inline constexpr int kHeaderMismatch = -32020;
inline constexpr int kMissingRequiredClientCapability = -32021;
inline constexpr int kUnsupportedProtocolVersion = -32022;

// A request (or notification) of the modern era: one whose params._meta
// names a protocol version. A request without it is legacy (and needs
// initialize first).
bool ModernRequest(const Message& message);

// What a modern request's _meta says, once checked.
struct Envelope {
  std::string protocol_version;
  nlohmann::json client_capabilities;  // an object
  nlohmann::json client_info;          // an object, or null
  int log_level = -1;                  // LogLevel's index; -1: no log messages
};
// The _meta of a modern request, checked: -32602 for a required field that
// is missing or malformed (protocolVersion, clientCapabilities) or a bad
// clientInfo or logLevel; -32022, with data {supported, requested}, for a
// version not served in this era (a legacy version included: that era
// begins with initialize).
std::expected<Envelope, RpcError> ReadEnvelope(const Message& message);

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
  // When a tool call was last answered: a transport that ends idle
  // sessions counts idleness from the later of this and its last request.
  std::chrono::steady_clock::time_point last_answered;
  // None until logging/setLevel asks (std::size(kLogLevels): nothing).
  int log_level = static_cast<int>(std::size(kLogLevels));
};

// The result of a modern request as that era has it: resultType
// "complete", and the server's identity in _meta. An error (and a null, a
// cancelled call's) passes unchanged.
nlohmann::json ModernResponse(nlohmann::json response);
// server/discover's result (before ModernResponse): supportedVersions,
// capabilities, instructions, and its cache hints.
nlohmann::json DiscoverResult();

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
  // Cancels the connection's calls in flight, for `reason` (and no more:
  // its sessions stay). Over HTTP in 2026-07-28 a client cancels a request
  // by closing its response stream. Static: it needs no server, so that a
  // transport's callback can hold the connection alone.
  static void CancelCalls(Connection& connection, const std::string& reason);

  Engine& engine() { return engine_; }

 private:
  void Initialize(Connection& connection, const Message& message, const Reply& reply);
  // A request with a modern _meta: served statelessly, whatever the
  // connection saw before (its calls are kept in the connection's state
  // only so that notifications/cancelled on stdio can find them).
  void HandleModern(Connection& connection, const Message& message, Reply reply, Notify notify);
  // `modern`: the envelope of a modern call (its log level, and no
  // session of it is tied to the connection); null for a legacy one.
  void CallTool(Connection& connection, const Message& message, Reply reply, Notify notify,
                const Envelope* modern = nullptr);
  void SetLevel(Connection& connection, const Message& message, const Reply& reply);
  void Cancelled(Connection& connection, const Message& message);

  Engine engine_;
};

}  // namespace cordon::mcp
