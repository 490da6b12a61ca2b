#include "mcp/http_transport.h"

#include <boost/asio/ip/address.hpp>

#include "sys/json_text.h"
#include "sys/random.h"

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

}  // namespace

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
  // An ended session takes its calls and the cordon sessions it made along.
  auto end = [&](auto it) {
    server_.Close(it->second->connection);
    return sessions_.erase(it);
  };
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = now - it->second->last_used > options_.idle_ttl ? end(it) : std::next(it);
  }
  while (sessions_.size() >= options_.max_sessions) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second->last_used < oldest->second->last_used) oldest = it;
    }
    end(oldest);
  }
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
    if (ok) sessions_.emplace(id, std::move(session));
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
  // The answer to this POST: JSON, unless a notification came first; then
  // an SSE stream (the spec's other form of the answer), which the response
  // ends. A cancelled request's stream ends without one (the client is no
  // longer waiting; it must not wait on the POST either).
  struct Answer {
    bool streaming = false;
    bool ended = false;
  };
  auto state = std::make_shared<Answer>();
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
  auto reply = [ex, state, begin, event](json response) {
    if (state->ended) return;
    state->ended = true;
    if (!state->streaming && !response.is_null()) {
      return ex->Respond(200, sys::JsonText(response) + "\n", "application/json");
    }
    begin();
    if (!response.is_null()) ex->Stream(event(response));
    ex->EndStream();
  };
  server_.Handle(session->connection, *message, std::move(reply), std::move(notify));
}

}  // namespace cordon::mcp
