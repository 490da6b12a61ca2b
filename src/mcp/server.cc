#include "mcp/server.h"

#include <boost/asio/steady_timer.hpp>
#include <utility>

#include "api/log.h"
#include "mcp/output.h"
#include "sys/text.h"

#ifndef CORDON_VERSION
#define CORDON_VERSION "dev"
#endif

namespace cordon::mcp {

using nlohmann::json;

bool SupportedVersion(std::string_view version) {
  for (auto v : kProtocolVersions) {
    if (v == version) return true;
  }
  return false;
}

bool ModernVersion(std::string_view version) {
  for (auto v : kModernVersions) {
    if (v == version) return true;
  }
  return false;
}

json AllVersions() {
  json all = json::array();
  for (auto v : kModernVersions) all.push_back(v);
  for (auto v : kProtocolVersions) all.push_back(v);
  return all;
}

bool ModernRequest(const Message& m) {
  if (m.kind == Message::Kind::kResponse || !m.params.is_object()) return false;
  auto meta = m.params.find("_meta");
  return meta != m.params.end() && meta->is_object() && meta->contains(kMetaProtocolVersion);
}

std::expected<Envelope, RpcError> ReadEnvelope(const Message& m) {
  auto invalid = [&](std::string message) {
    return std::unexpected(RpcError{kInvalidParams, std::move(message), m.id});
  };
  auto field = [](const char* key) { return "params._meta[\"" + std::string(key) + "\"]"; };
  if (!ModernRequest(m)) {
    return invalid(field(kMetaProtocolVersion) +
                   ": is required on a request without initialize (\"2026-07-28\")");
  }
  const json& meta = m.params["_meta"];
  const json& version = meta[kMetaProtocolVersion];
  if (!version.is_string()) {
    return invalid(field(kMetaProtocolVersion) + ": must be a string such as \"2026-07-28\"");
  }
  Envelope e;
  e.protocol_version = version.get<std::string>();
  if (!ModernVersion(e.protocol_version)) {
    const std::string legacy = sys::JoinNames(kProtocolVersions);
    const bool is_legacy = SupportedVersion(e.protocol_version);
    return std::unexpected(
        RpcError{kUnsupportedProtocolVersion,
                 "Unsupported protocol version: " + field(kMetaProtocolVersion) + " is \"" +
                     e.protocol_version + "\"; per request this server speaks 2026-07-28" +
                     (is_legacy ? ", and " + e.protocol_version + " only after initialize"
                                : "; after initialize: " + legacy),
                 m.id, json{{"supported", AllVersions()}, {"requested", e.protocol_version}}});
  }
  auto capabilities = meta.find(kMetaClientCapabilities);
  if (capabilities == meta.end() || !capabilities->is_object()) {
    return invalid(field(kMetaClientCapabilities) +
                   ": is required on every 2026-07-28 request, an object ({} for none)");
  }
  e.client_capabilities = *capabilities;
  auto info = meta.find(kMetaClientInfo);
  if (info != meta.end() && !info->is_null()) {
    if (!info->is_object()) return invalid(field(kMetaClientInfo) + ": must be an object");
    e.client_info = *info;
  }
  auto level = meta.find(kMetaLogLevel);
  if (level != meta.end() && !level->is_null()) {
    e.log_level = level->is_string() ? LogLevel(level->get<std::string>()) : -1;
    if (e.log_level < 0) {
      return invalid(field(kMetaLogLevel) + ": must be one of " + sys::JoinNames(kLogLevels) +
                     " (least severe first)");
    }
  }
  return e;
}

json ModernResponse(json response) {
  if (!response.is_object() || !response.contains("result") || !response["result"].is_object()) {
    return response;
  }
  json& result = response["result"];
  result["resultType"] = "complete";
  if (!result.contains("_meta") || !result["_meta"].is_object()) result["_meta"] = json::object();
  result["_meta"][kMetaServerInfo] = {{"name", "cordon"}, {"version", CORDON_VERSION}};
  return response;
}

int LogLevel(std::string_view name) {
  for (size_t i = 0; i < std::size(kLogLevels); ++i) {
    if (kLogLevels[i] == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

// The most of an output line a progress message carries.
constexpr size_t kProgressLine = 200;

// What initialize and server/discover tell the model about the tools.
constexpr char kInstructions[] =
    "cordon runs commands in sandboxes whose every bound is observed. run: one command in a "
    "fresh sandbox. session_create, session_exec: a shell or python session that keeps its "
    "state and workspace between calls; file_write, file_read, file_list: that workspace's "
    "files. A command that ran is never an error: read exit_code, timed_out, outcome.";

std::string Seconds(std::chrono::steady_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

}  // namespace

// One tools/call, from the request until it is answered or cancelled: its
// progress notifications (while it lasts, when it has a progressToken), its
// log events, its cancellation, and its count in /metrics.
class ToolCall final : public CallContext, public std::enable_shared_from_this<ToolCall> {
 public:
  // `modern`: the call's own log level (-1: no log messages) and no
  // session tied to the connection; null: the connection's (legacy).
  ToolCall(boost::asio::io_context& io, api::Metrics& metrics, std::string tool, json id,
           json token, Server::Reply reply, Server::Notify notify,
           std::weak_ptr<ConnectionState> connection, const Envelope* modern)
      : modern_(modern != nullptr),
        modern_log_level_(modern ? modern->log_level : -1),
        timer_(io),
        metrics_(metrics),
        tool_(std::move(tool)),
        id_(std::move(id)),
        token_(std::move(token)),
        reply_(std::move(reply)),
        notify_(std::move(notify)),
        connection_(std::move(connection)) {}

  void Start() {
    if (!token_.is_null() && notify_) Arm();
  }

  // The tool's answer; dropped once the call was cancelled.
  void Finish(json result) {
    if (answered_) return;
    Answered(result.value("isError", false) ? "error" : "ok");
    reply_(Response(id_, std::move(result)));
  }

  void Cancel(const std::string& reason) {
    if (answered_) return;
    auto cancel = std::exchange(cancel_, nullptr);
    Answered("cancelled");
    api::Log("info", "mcp_call_cancelled",
             {{"tool", tool_}, {"request_id", id_}, {"reason", reason}});
    // The response is not sent (the spec: the client no longer waits for
    // it); the transport ends what it must.
    reply_(nullptr);
    if (cancel) cancel();
  }

  void Output(std::string_view bytes) override {
    // The latest line: an unfinished one as soon as it has something.
    for (char c : bytes) {
      if (c == '\n' || c == '\r') {
        if (!current_.empty()) last_ = std::exchange(current_, std::string());
      } else if (current_.size() < 4 * kProgressLine) {
        current_.push_back(c);
      }
    }
  }

  void OnCancel(std::function<void()> cancel) override {
    if (!answered_) cancel_ = std::move(cancel);
  }

  void Log(std::string_view level, std::string_view event, json fields) override {
    json data = fields.is_object() ? fields : json::object();
    data["tool"] = tool_;
    // On stderr, "mcp_" tells these from the engine's own events.
    api::Log(level, "mcp_" + std::string(event), data);
    data["event"] = event;
    if (!notify_) return;
    if (modern_) {
      // 2026-07-28: only a request that asked (its _meta's logLevel) hears any.
      if (modern_log_level_ < 0 || LogLevel(level) < modern_log_level_) return;
    } else {
      auto connection = connection_.lock();
      if (!connection || LogLevel(level) < connection->log_level) return;
    }
    notify_(Notification("notifications/message",
                         {{"level", level}, {"logger", "cordon"}, {"data", std::move(data)}}));
  }

  // A modern request has no MCP session to end with: its cordon sessions
  // live until session_close or their ttl_s (docs/mcp.md).
  void SessionCreated(const std::string& id) override {
    if (modern_) return;
    if (auto connection = connection_.lock()) connection->sessions.insert(id);
  }
  void SessionClosed(const std::string& id) override {
    if (auto connection = connection_.lock()) connection->sessions.erase(id);
  }

 private:
  void Answered(const char* result) {
    answered_ = true;
    timer_.cancel();
    cancel_ = nullptr;  // what it holds (a session's exec line) is not kept past the answer
    ++metrics_.mcp_tool_calls[{tool_, result}];
    if (auto connection = connection_.lock()) {
      connection->last_answered = std::chrono::steady_clock::now();
      auto it = connection->calls.find(id_.dump());
      if (it != connection->calls.end() && it->second.lock().get() == this) {
        connection->calls.erase(it);
      }
    }
  }

  void Arm() {
    timer_.expires_after(kProgressEvery);
    timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->answered_) return;
      self->Progress();
      self->Arm();
    });
  }

  // progress: the seconds elapsed (increasing, as the spec requires; no
  // total, since how long a command runs is not known); message: its
  // latest line of output, or how long it has run.
  void Progress() {
    const auto elapsed = std::chrono::steady_clock::now() - started_;
    std::string line = current_.empty() ? last_ : current_;
    line.resize(Utf8Cut(line, kProgressLine));
    if (line.empty()) line = tool_ + ": running for " + Seconds(elapsed);
    const double progress =
        std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() / 1000.0;
    notify_(Notification("notifications/progress",
                         {{"progressToken", token_}, {"progress", progress}, {"message", line}}));
  }

  const bool modern_;
  const int modern_log_level_;
  boost::asio::steady_timer timer_;
  api::Metrics& metrics_;
  const std::string tool_;
  const json id_;
  const json token_;  // null: no progress notifications
  Server::Reply reply_;
  Server::Notify notify_;
  std::weak_ptr<ConnectionState> connection_;
  std::function<void()> cancel_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string current_, last_;
  bool answered_ = false;
};

void Server::HandleText(Connection& connection, std::string_view text, Reply reply, Notify notify) {
  auto message = Parse(text);
  if (!message) return reply(ErrorResponse(message.error()));
  Handle(connection, *message, std::move(reply), std::move(notify));
}

void Server::Handle(Connection& c, const Message& m, Reply reply, Notify notify) {
  if (m.kind == Message::Kind::kResponse) return;  // cordon sends no requests yet
  if (m.kind == Message::Kind::kNotification) {
    if (m.method == "notifications/initialized") c.initialized = true;
    if (m.method == "notifications/cancelled") Cancelled(c, m);
    // Others (notifications/roots/list_changed, ...) need nothing.
    return;
  }
  auto fail = [&](int code, std::string message) {
    reply(ErrorResponse(RpcError{code, std::move(message), m.id}));
  };
  // The era, as the 2026-07-28 versioning section picks it: initialize
  // opens a legacy connection (and keeps it legacy); a request with a
  // protocol version in its _meta, on a connection not initialized, is
  // modern.
  if (m.method != "initialize" && !c.initialize_answered && ModernRequest(m)) {
    return HandleModern(c, m, std::move(reply), std::move(notify));
  }
  if (m.method == "ping") return reply(Response(m.id, json::object()));
  if (m.method == "initialize") return Initialize(c, m, reply);
  if (!c.initialize_answered) {
    return fail(kInvalidRequest, m.method +
                                     ": the connection is not initialized: send "
                                     "initialize first (2025-11-25 and earlier), or carry "
                                     "params._meta[\"" +
                                     kMetaProtocolVersion + "\"] on every request (2026-07-28)");
  }
  if (m.method == "tools/list") {
    // One page: the table is short (params.cursor is ignored).
    return reply(Response(m.id, {{"tools", ToolList()}}));
  }
  if (m.method == "tools/call") return CallTool(c, m, std::move(reply), std::move(notify));
  if (m.method == "logging/setLevel") return SetLevel(c, m, reply);
  fail(kMethodNotFound, "method not found: " + m.method +
                            " (this server has initialize, ping, tools/list, tools/call and "
                            "logging/setLevel)");
}

json DiscoverResult() {
  return {{"supportedVersions", AllVersions()},
          {"capabilities", {{"tools", {{"listChanged", false}}}, {"logging", json::object()}}},
          {"instructions", kInstructions},
          // The answer changes only with the binary; 0 (no caching) lets an
          // upgraded cordon behind the same URL be seen at once.
          {"ttlMs", 0},
          {"cacheScope", "private"}};
}

void Server::HandleModern(Connection& c, const Message& m, Reply reply, Notify notify) {
  auto envelope = ReadEnvelope(m);
  if (!envelope) return reply(ErrorResponse(envelope.error()));
  Reply modern = [reply = std::move(reply)](json response) {
    reply(ModernResponse(std::move(response)));
  };
  if (m.method == "server/discover") {
    api::Log("info", "mcp_discover",
             {{"client", envelope->client_info}, {"protocol_version", envelope->protocol_version}});
    return modern(Response(m.id, DiscoverResult()));
  }
  if (m.method == "tools/list") {
    return modern(Response(m.id, {{"tools", ToolList()}, {"ttlMs", 0}, {"cacheScope", "private"}}));
  }
  if (m.method == "tools/call") {
    return CallTool(c, m, std::move(modern), std::move(notify), &*envelope);
  }
  modern(ErrorResponse(RpcError{
      kMethodNotFound,
      "method not found: " + m.method +
          " (in 2026-07-28 this server has server/discover, tools/list and tools/call; ping "
          "and logging/setLevel are not of that era: a request asks for log messages with "
          "params._meta[\"" +
          kMetaLogLevel + "\"])",
      m.id}));
}

void Server::SetLevel(Connection& c, const Message& m, const Reply& reply) {
  const json& p = m.params;
  const std::string level = p.is_object() && p.contains("level") && p["level"].is_string()
                                ? p["level"].get<std::string>()
                                : "";
  const int index = LogLevel(level);
  if (index < 0) {
    return reply(ErrorResponse(RpcError{
        kInvalidParams,
        "params.level: is required, one of " + sys::JoinNames(kLogLevels) + " (least severe first)",
        m.id}));
  }
  c.state->log_level = index;
  reply(Response(m.id, json::object()));
}

void Server::Cancelled(Connection& c, const Message& m) {
  const json& p = m.params;
  if (!p.is_object() || !p.contains("requestId")) return;  // nothing to act on; no answer is owed
  auto it = c.state->calls.find(p["requestId"].dump());
  if (it == c.state->calls.end()) return;  // answered already, or never a call
  std::shared_ptr<ToolCall> call = it->second.lock();
  if (!call) return;
  call->Cancel(p.value("reason", json("")).is_string() ? p.value("reason", std::string())
                                                       : std::string());
}

void Server::CancelCalls(Connection& c, const std::string& reason) {
  // Cancel removes each call from the map: take them out first.
  auto calls = std::move(c.state->calls);
  c.state->calls.clear();
  for (auto& [id, weak] : calls) {
    if (auto call = weak.lock()) call->Cancel(reason);
  }
}

void Server::Close(Connection& c) {
  CancelCalls(c, "the MCP session ended");
  auto sessions = std::move(c.state->sessions);
  c.state->sessions.clear();
  for (const auto& id : sessions) {
    engine_.sessions.Delete(id, false, [id](session::Outcome<json> r) {
      if (r)
        return api::Log("info", "mcp_session_closed",
                        {{"session_id", id}, {"why", "the MCP session ended"}});
      api::Log("error", "mcp_session_close_failed",
               {{"session_id", id}, {"error", r.error().message}});
    });
  }
}

void Server::Initialize(Connection& c, const Message& m, const Reply& reply) {
  auto fail = [&](std::string message) {
    reply(ErrorResponse(RpcError{kInvalidParams, std::move(message), m.id}));
  };
  if (c.initialize_answered) {
    return reply(ErrorResponse(
        RpcError{kInvalidRequest, "initialize: this connection is already initialized", m.id}));
  }
  const json& p = m.params;
  if (!p.is_object() || !p.contains("protocolVersion") || !p["protocolVersion"].is_string()) {
    return fail("params.protocolVersion: is required (a string such as \"2025-11-25\")");
  }
  if (p.contains("capabilities") && !p["capabilities"].is_object()) {
    return fail("params.capabilities: must be an object");
  }
  const std::string asked = p["protocolVersion"].get<std::string>();
  c.protocol_version = SupportedVersion(asked) ? asked : std::string(kProtocolVersions[0]);
  c.client_info = p.value("clientInfo", json::object());
  c.initialize_answered = true;
  api::Log("info", "mcp_initialize",
           {{"client", c.client_info}, {"asked", asked}, {"protocol_version", c.protocol_version}});
  reply(Response(
      m.id, {{"protocolVersion", c.protocol_version},
             {"capabilities", {{"tools", {{"listChanged", false}}}, {"logging", json::object()}}},
             {"serverInfo", {{"name", "cordon"}, {"version", CORDON_VERSION}}},
             {"instructions", kInstructions}}));
}

void Server::CallTool(Connection& c, const Message& m, Reply reply, Notify notify,
                      const Envelope* modern) {
  const json& p = m.params;
  const Tool* tool = nullptr;
  auto fail = [&](std::string message) {
    // Counted under the tool's name only when it is one: a label of
    // /metrics takes no name a client made up.
    ++engine_.runs.metrics().mcp_tool_calls[{tool ? tool->name : "unknown", "error"}];
    reply(ErrorResponse(RpcError{kInvalidParams, std::move(message), m.id}));
  };
  if (!p.is_object() || !p.contains("name") || !p["name"].is_string()) {
    return fail("params.name: is required: the tool's name (see tools/list)");
  }
  const std::string name = p["name"].get<std::string>();
  tool = FindTool(name);
  if (!tool) {
    return fail("unknown tool: " + name +
                " (tools: " + sys::JoinNames(Tools() | std::views::transform(&Tool::name)) + ")");
  }
  json arguments = p.value("arguments", json::object());
  if (arguments.is_null()) arguments = json::object();
  if (!arguments.is_object()) return fail("params.arguments: must be an object");
  json token = nullptr;
  if (p.contains("_meta") && p["_meta"].is_object() && p["_meta"].contains("progressToken")) {
    token = p["_meta"]["progressToken"];
    if (!token.is_string() && !token.is_number_integer()) {
      return fail("params._meta.progressToken: must be a string or an integer");
    }
  }
  auto call = std::make_shared<ToolCall>(engine_.runs.reactor().io(), engine_.runs.metrics(), name,
                                         m.id, std::move(token), std::move(reply),
                                         std::move(notify), c.state, modern);
  c.state->calls[m.id.dump()] = call;
  call->Start();
  tool->call(engine_, call, arguments, [call](json result) { call->Finish(std::move(result)); });
}

}  // namespace cordon::mcp
