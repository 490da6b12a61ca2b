#include "mcp/http_transport.h"

#include <algorithm>
#include <boost/asio/ip/address.hpp>

#include "api/log.h"
#include "sys/json_text.h"
#include "sys/random.h"
#include "sys/text.h"

namespace cordon::mcp {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// "scheme://host[:port]" to host, brackets of an IPv6 literal removed.
std::string OriginHost(std::string origin) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string::npos) return "";
  std::string rest = origin.substr(scheme + 3);
  rest = rest.substr(0, rest.find('/'));
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    return close == std::string::npos ? "" : rest.substr(1, close - 1);
  }
  return rest.substr(0, rest.find(':'));
}

bool LoopbackHost(const std::string& host) {
  if (host == "localhost" || host.ends_with(".localhost")) return true;
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

void RespondRpcError(const std::shared_ptr<api::Exchange>& ex, int status, int code,
                     std::string message, api::Exchange::Headers headers = {}) {
  ex->RespondJson(status, ErrorResponse(RpcError{code, std::move(message), nullptr}),
                  std::move(headers));
}

// The answer to one POST: JSON, unless a notification came first; then an
// SSE stream (the spec's other form of the answer), which the response
// ends. A cancelled request's stream ends without one (the client is no
// longer waiting; it must not wait on the POST either). `status` gives a
// JSON answer's status (a stream is 200 from its first event).
struct PostAnswer {
  bool streaming = false;
  bool ended = false;
};
std::pair<Server::Reply, Server::Notify> Answer(const std::shared_ptr<api::Exchange>& ex,
                                                const std::shared_ptr<PostAnswer>& state,
                                                std::function<int(const json&)> status) {
  auto event = [](const json& message) {
    return "event: message\ndata: " + sys::JsonText(message) + "\n\n";
  };
  auto begin = [ex, state] {
    if (state->streaming) return;
    state->streaming = true;
    ex->BeginStream(200, "text/event-stream");
  };
  auto notify = [ex, state, begin, event](json notification) {
    if (state->ended) return;
    begin();
    ex->Stream(event(notification));
  };
  auto reply = [ex, state, begin, event, status = std::move(status)](json response) {
    if (state->ended) return;
    state->ended = true;
    if (!state->streaming && !response.is_null()) {
      return ex->Respond(status(response), sys::JsonText(response) + "\n", "application/json");
    }
    begin();
    if (!response.is_null()) ex->Stream(event(response));
    ex->EndStream();
  };
  return {std::move(reply), std::move(notify)};
}

std::optional<std::string> HeaderValue(const api::Header& header, std::string_view name) {
  auto it = header.find(boost::beast::string_view(name.data(), name.size()));
  if (it == header.end()) return std::nullopt;
  return std::string(it->value());
}

}  // namespace

bool ModernPost(const api::Header& header, const Message& message) {
  if (ModernRequest(message)) return true;
  auto version = HeaderValue(header, "MCP-Protocol-Version");
  return version && ModernVersion(*version);
}

std::optional<RpcError> CheckModernHeaders(const api::Header& header, const Message& m) {
  auto mismatch = [&](std::string message) {
    return RpcError{kHeaderMismatch, "Header mismatch: " + std::move(message), m.id};
  };
  const std::string meta_field = "params._meta[\"" + std::string(kMetaProtocolVersion) + "\"]";
  std::string body_version;
  if (ModernRequest(m) && m.params["_meta"][kMetaProtocolVersion].is_string()) {
    body_version = m.params["_meta"][kMetaProtocolVersion].get<std::string>();
  }
  auto version = HeaderValue(header, "MCP-Protocol-Version");
  if (!version) {
    return mismatch(
        "MCP-Protocol-Version: the header is required on every 2026-07-28 POST, "
        "equal to " +
        meta_field);
  }
  if (*version != body_version) {
    return mismatch("MCP-Protocol-Version header value '" + *version + "' does not match " +
                    meta_field + " '" + body_version + "'");
  }
  auto method = HeaderValue(header, "Mcp-Method");
  if (!method) {
    return mismatch(
        "Mcp-Method: the header is required on every 2026-07-28 POST, equal to the "
        "body's method (" +
        m.method + ")");
  }
  if (*method != m.method) {
    return mismatch("Mcp-Method header value '" + *method + "' does not match the body's method '" +
                    m.method + "'");
  }
  if (m.method != "tools/call") return std::nullopt;
  const std::string body_name =
      m.params.is_object() && m.params.contains("name") && m.params["name"].is_string()
          ? m.params["name"].get<std::string>()
          : "";
  auto name = HeaderValue(header, "Mcp-Name");
  if (!name) {
    return mismatch("Mcp-Name: the header is required on tools/call, equal to params.name (" +
                    body_name + ")");
  }
  // A name that is not plain ASCII comes as =?base64?...?= (the spec's
  // Value Encoding); it is compared once decoded.
  constexpr std::string_view kPrefix = "=?base64?", kSuffix = "?=";
  std::string given = *name;
  if (given.size() >= kPrefix.size() + kSuffix.size() && given.starts_with(kPrefix) &&
      given.ends_with(kSuffix)) {
    auto decoded = sys::Base64Decode(std::string_view(given).substr(
        kPrefix.size(), given.size() - kPrefix.size() - kSuffix.size()));
    if (!decoded) {
      return mismatch("Mcp-Name header value '" + given +
                      "' is not valid base64 between =?base64? and ?=");
    }
    given = std::move(*decoded);
  }
  if (given != body_name) {
    return mismatch("Mcp-Name header value '" + given + "' does not match params.name '" +
                    body_name + "'");
  }
  return std::nullopt;
}

int ModernStatus(const json& response) {
  if (!response.is_object() || !response.contains("error")) return 200;
  const json& code = response["error"].value("code", json(0));
  if (!code.is_number_integer()) return 200;
  switch (code.get<int>()) {
    case kMethodNotFound:
      return 404;
    case kParseError:
    case kInvalidRequest:
    case kHeaderMismatch:
    case kMissingRequiredClientCapability:
    case kUnsupportedProtocolVersion:
      return 400;
    default:
      return 200;
  }
}

std::optional<api::ApiError> CheckOrigin(const api::Header& header) {
  auto it = header.find(api::http::field::origin);
  if (it == header.end()) return std::nullopt;
  const std::string origin(it->value());
  if (LoopbackHost(OriginHost(origin))) return std::nullopt;
  return api::ApiError{403, "forbidden",
                       "Origin " + origin +
                           " is not a loopback origin: /mcp answers no web page but the "
                           "host's own (DNS rebinding)",
                       "Origin", nullptr};
}

void HttpTransport::Expire() {
  const auto now = Clock::now();
  // Idle: no call in flight (a run may outlast the TTL; its client waits
  // on it), and nothing asked or answered for the TTL.
  auto idle = [&](const Session& s) {
    const ConnectionState& state = *s.connection.state;
    if (std::any_of(state.calls.begin(), state.calls.end(),
                    [](const auto& call) { return !call.second.expired(); })) {
      return false;
    }
    return now - std::max(s.last_used, state.last_answered) > options_.idle_ttl;
  };
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = idle(*it->second) ? End(it) : std::next(it);
  }
}

void HttpTransport::MakeRoom() {
  while (!sessions_.empty() && sessions_.size() >= options_.max_sessions) {
    auto oldest = std::min_element(
        sessions_.begin(), sessions_.end(),
        [](const auto& a, const auto& b) { return a.second->last_used < b.second->last_used; });
    api::Log("warning", "mcp_session_evicted",
             {{"max_sessions", options_.max_sessions},
              {"idle_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                              Clock::now() - oldest->second->last_used)
                              .count()},
              {"why",
               "an initialize found --mcp-max-sessions MCP sessions: the least recently "
               "used was ended"}});
    End(oldest);
  }
}

HttpTransport::Sessions::iterator HttpTransport::End(Sessions::iterator it) {
  server_.Close(it->second->connection);
  return sessions_.erase(it);
}

void HttpTransport::Handle(const api::Request& request, const std::shared_ptr<api::Exchange>& ex) {
  namespace http = api::http;
  const http::verb method = request.message.method();
  const std::string session_id(request.message["Mcp-Session-Id"]);
  Expire();
  if (method == http::verb::get) {
    // No server-initiated stream: the spec lets a server answer 405.
    return ex->RespondJson(405,
                           ToJson(api::ApiError{405, "method_not_allowed",
                                                "GET /mcp: this server opens no event stream; "
                                                "POST messages (DELETE ends a session)",
                                                "", nullptr}),
                           {{"Allow", "POST, DELETE"}});
  }
  auto find = [&]() -> Session* {
    auto it = sessions_.find(session_id);
    return it == sessions_.end() ? nullptr : it->second.get();
  };
  if (method == http::verb::delete_) {
    if (session_id.empty()) {
      return RespondRpcError(ex, 400, kInvalidRequest,
                             "Mcp-Session-Id: the header is required: the session to end");
    }
    if (!find()) {
      return RespondRpcError(
          ex, 404, kInvalidRequest,
          "Mcp-Session-Id: no session " + session_id + " (ended or expired): initialize a new one");
    }
    server_.Close(find()->connection);
    sessions_.erase(session_id);
    return ex->Respond(204, "", "");
  }
  if (method != http::verb::post) {
    return ex->RespondJson(405,
                           ToJson(api::ApiError{405, "method_not_allowed",
                                                std::string(request.message.method_string()) +
                                                    " is not allowed on /mcp (allowed: POST, "
                                                    "DELETE)",
                                                "", nullptr}),
                           {{"Allow", "POST, DELETE"}});
  }
  auto message = Parse(request.message.body());
  if (!message) return ex->RespondJson(400, ErrorResponse(message.error()));
  auto answer = [ex](api::Exchange::Headers headers) {
    return [ex, headers = std::move(headers)](json response) {
      ex->Respond(200, sys::JsonText(response) + "\n", "application/json", headers);
    };
  };
  if (message->method != "initialize" && ModernPost(request.message, *message)) {
    return HandleModern(request, ex, *message);
  }
  if (message->kind == Message::Kind::kRequest && message->method == "initialize") {
    // A new session; an Mcp-Session-Id sent along is not reused.
    auto session = std::make_unique<Session>();
    session->last_used = Clock::now();
    const std::string id = sys::RandomHex(16);
    // initialize is answered before Handle returns (server.cc), so `ok`
    // is set by then; the session is kept only if it succeeded.
    bool ok = false;
    Connection& c = session->connection;
    server_.Handle(c, *message, [&, respond = answer({{"Mcp-Session-Id", id}})](json response) {
      ok = response.contains("result");
      respond(std::move(response));
    });
    if (ok) {
      MakeRoom();
      sessions_.emplace(id, std::move(session));
    }
    return;
  }
  if (session_id.empty()) {
    return RespondRpcError(ex, 400, kInvalidRequest,
                           "Mcp-Session-Id: the header is required after initialize (the "
                           "initialize response carried it)");
  }
  Session* session = find();
  if (!session) {
    return RespondRpcError(
        ex, 404, kInvalidRequest,
        "Mcp-Session-Id: no session " + session_id + " (ended or expired): initialize a new one");
  }
  session->last_used = Clock::now();
  // The version negotiated at initialize, on every request after it (a
  // client of 2025-03-26 sends none: that version is then assumed).
  auto version = request.message.find("MCP-Protocol-Version");
  if (version != request.message.end()) {
    const std::string given(version->value());
    if (!SupportedVersion(given) || given != session->connection.protocol_version) {
      return RespondRpcError(ex, 400, kInvalidRequest,
                             "MCP-Protocol-Version: \"" + given +
                                 "\" is not the version this session negotiated (" +
                                 session->connection.protocol_version + ")");
    }
  }
  if (message->kind != Message::Kind::kRequest) {
    server_.Handle(session->connection, *message, [](json) {});
    return ex->Respond(202, "", "");
  }
  auto [reply, notify] =
      Answer(ex, std::make_shared<PostAnswer>(), [](const json&) { return 200; });
  server_.Handle(session->connection, *message, std::move(reply), std::move(notify));
}

void HttpTransport::HandleModern(const api::Request& request,
                                 const std::shared_ptr<api::Exchange>& ex, const Message& message) {
  // 2026-07-28 defines no client notification over HTTP (a client cancels
  // by closing the response stream): one is accepted and has no effect.
  if (message.kind != Message::Kind::kRequest) return ex->Respond(202, "", "");
  if (auto mismatch = CheckModernHeaders(request.message, message)) {
    return ex->RespondJson(400, ErrorResponse(*mismatch));
  }
  if (auto envelope = ReadEnvelope(message); !envelope) {
    return ex->RespondJson(400, ErrorResponse(envelope.error()));
  }
  // Stateless: this POST's own connection, which ends with its answer. The
  // cordon sessions its tools create are not tied to it (there is no MCP
  // session to end them with): they live until session_close or ttl_s.
  auto connection = std::make_shared<Connection>();
  auto state = std::make_shared<PostAnswer>();
  auto [reply, notify] = Answer(ex, state, ModernStatus);
  server_.Handle(*connection, message, std::move(reply), std::move(notify));
  if (state->ended) return;
  // Still running: a client that closes the stream cancels the request.
  ex->WatchClient(
      [connection] { Server::CancelCalls(*connection, "the client closed the response stream"); });
}

}  // namespace cordon::mcp
