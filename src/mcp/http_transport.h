// MCP's Streamable HTTP transport at /mcp in the daemon, in both eras.
//
// Legacy (2025-11-25 and earlier): a POST carries
// one message and is answered with JSON, or, once the request has a
// notification to send first (its progress, a log event), with an SSE
// stream of those and then the response; GET (the server's own stream)
// is 405; DELETE ends a session, and with it the calls it has in flight
// and the cordon sessions its tools created (as does its expiry). A session
// (Mcp-Session-Id) is issued by initialize and required on every request
// after it: 400 without it, 404 once it is unknown or expired.
//
// Modern (2026-07-28: a POST whose request has a protocol version in its
// params._meta, or a modern MCP-Protocol-Version header): stateless, no
// Mcp-Session-Id (one sent is ignored), POST only. The MCP-Protocol-Version,
// Mcp-Method and Mcp-Name headers must match the body (400, HeaderMismatch);
// a bad _meta or an unsupported version is 400, an unknown method 404; the
// answer is JSON or an SSE stream as above, and a client that closes it
// cancels the request.
//
// The token
// is the daemon's, checked before this sees a request (401 with
// WWW-Authenticate: Bearer); CheckOrigin runs before that.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "api/http.h"
#include "mcp/server.h"

namespace cordon::mcp {

inline constexpr std::string_view kPath = "/mcp";

// 403 for an Origin header that is not a loopback origin (a web page's
// request, DNS rebinding: the MCP transport spec's first rule); none for
// a request without Origin (not a browser's) or with a loopback one.
std::optional<api::ApiError> CheckOrigin(const api::Header& header);

// A POST of the modern era (see above); `message` is its body.
bool ModernPost(const api::Header& header, const Message& message);
// The 2026-07-28 request headers against the body (that transport's Server
// Validation): MCP-Protocol-Version equal to params._meta's version,
// Mcp-Method to the method, and for tools/call Mcp-Name (decoded when it is
// "=?base64?...?=") to params.name. A header missing or different is a
// HeaderMismatch error (-32020) naming it; none when all match.
std::optional<RpcError> CheckModernHeaders(const api::Header& header, const Message& message);
// The HTTP status of a modern request's answer: 404 for an unknown method
// (-32601), 400 for the errors that spec puts there (a malformed request,
// an unsupported version, a header mismatch, a missing capability), else
// 200 (a tool's error is a result; an unknown tool's -32602 is the body's).
int ModernStatus(const nlohmann::json& response);

class HttpTransport final {
 public:
  struct Options {
    std::chrono::milliseconds idle_ttl{60 * 60 * 1000};  // then 404
    // An initialize that would pass it ends the least recently used.
    size_t max_sessions = 1024;
  };
  // `server` must outlive this.
  HttpTransport(Server& server, Options options) : server_(server), options_(options) {}

  void Handle(const api::Request& request, const std::shared_ptr<api::Exchange>& exchange);

 private:
  struct Session {
    Connection connection;
    std::chrono::steady_clock::time_point last_used;
  };
  using Sessions = std::map<std::string, std::unique_ptr<Session>>;
  // Ends the sessions idle past the TTL.
  void Expire();
  // Ends the least recently used sessions until one more fits.
  void MakeRoom();
  // Ends one: its calls are cancelled, the cordon sessions it made closed.
  Sessions::iterator End(Sessions::iterator it);
  void HandleModern(const api::Request& request, const std::shared_ptr<api::Exchange>& exchange,
                    const Message& message);

  Server& server_;
  Options options_;
  Sessions sessions_;
};

}  // namespace cordon::mcp
