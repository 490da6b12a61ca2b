// MCP's Streamable HTTP transport at /mcp in the daemon: a POST carries
// one message and is answered with JSON, or, once the request has a
// notification to send first (its progress, a log event), with an SSE
// stream of those and then the response; GET (the server's own stream)
// is 405; DELETE ends a session, and with it the calls it has in flight
// and the cordon sessions its tools created (as does its expiry). A session
// (Mcp-Session-Id) is issued by initialize and required on every request
// after it: 400 without it, 404 once it is unknown or expired. The token
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

class HttpTransport final {
 public:
  struct Options {
    std::chrono::milliseconds idle_ttl{60 * 60 * 1000};  // then 404
    size_t max_sessions = 1024;                          // past it the least recently used is ended
  };
  // `server` must outlive this.
  HttpTransport(Server& server, Options options) : server_(server), options_(options) {}

  void Handle(const api::Request& request, const std::shared_ptr<api::Exchange>& exchange);

 private:
  struct Session {
    Connection connection;
    std::chrono::steady_clock::time_point last_used;
  };
  void Expire();

  Server& server_;
  Options options_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
};

}  // namespace cordon::mcp
