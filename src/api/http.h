// HTTP/1.1 on Boost.Beast: keep-alive connections on TCP or a unix socket,
// one io_context (the daemon's loop). It knows nothing of cordon's routes:
// hooks admit a request once its header is read (auth, body limits) and
// handle it once its body is; a handler answers through its Exchange, at
// once or later (a run), whole or streamed in chunks (NDJSON).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/errors.h"
#include "sys/error.h"

namespace cordon::api {

namespace http = boost::beast::http;

using Header = http::request_header<>;

struct Request {
  std::string id;  // X-Request-Id of the response and the logs
  std::chrono::steady_clock::time_point received;
  http::request<http::string_body> message;
  std::string path;   // the target before '?', still percent-encoded
  std::string query;  // after '?'
};

// A WebSocket accepted from an HTTP request (RFC 6455, text and binary
// frames). Its handlers run on the daemon's loop; Send and SendBinary
// queue, in one order.
class WebSocket {
 public:
  struct Handlers {
    // A text frame's message; a binary one's too when `binary` is null.
    std::function<void(std::string text)> message;
    std::function<void(std::string bytes)> binary;  // a binary frame's message
    std::function<void()> closed;                   // once, when the connection ends either way
  };
  virtual ~WebSocket() = default;
  // Starts reading; the handlers are kept until the connection ends.
  virtual void Start(Handlers handlers) = 0;
  virtual void Send(std::string text) = 0;         // as a text frame
  virtual void SendBinary(std::string bytes) = 0;  // as a binary frame
  virtual void Close() = 0;
  // The subprotocol agreed in the handshake (Sec-WebSocket-Protocol), or
  // "" for none.
  virtual const std::string& subprotocol() const = 0;
};

// One request in flight. Exactly one of Respond, BeginStream ... EndStream,
// or UpgradeWebSocket.
class Exchange {
 public:
  virtual ~Exchange() = default;
  using Headers = std::vector<std::pair<std::string, std::string>>;
  // `content_length`: for HEAD, the length the body would have had.
  virtual void Respond(int status, std::string body, std::string content_type, Headers headers = {},
                       std::optional<uint64_t> content_length = std::nullopt) = 0;
  virtual void BeginStream(int status, std::string content_type) = 0;
  virtual void Stream(std::string data) = 0;
  virtual void EndStream() = 0;
  // `gone` runs once if the client closes its connection (or a write to it
  // fails) before the response is complete.
  virtual void WatchClient(std::function<void()> gone) = 0;
  // Answers a WebSocket upgrade (the request must be one; see
  // IsWebSocketUpgrade): `accepted` gets the socket once the handshake is
  // done (not at all if it fails). Messages over `max_message` bytes from
  // the client end the connection (close code 1009). `subprotocols`: those
  // the server speaks, preferred first; the first of them that the client
  // offers is agreed (WebSocket::subprotocol), none if it offers none.
  virtual void UpgradeWebSocket(uint64_t max_message,
                                std::function<void(std::shared_ptr<WebSocket>)> accepted,
                                std::vector<std::string> subprotocols) = 0;
  void UpgradeWebSocket(uint64_t max_message,
                        std::function<void(std::shared_ptr<WebSocket>)> accepted) {
    UpgradeWebSocket(max_message, std::move(accepted), {});
  }

  void RespondJson(int status, const nlohmann::json& body, Headers headers = {});
  void RespondError(const ApiError& error);
};

bool IsWebSocketUpgrade(const http::request<http::string_body>& request);

// See HttpLimits::send_timeout.
inline constexpr uint64_t kSendProgressBytes = 64 << 10;

struct HttpLimits {
  uint32_t header_bytes = 16 << 10;
  uint64_t body_bytes = 1 << 20;
  // Read timeouts against slow clients (slowloris); zero turns one off.
  // A request's header must be complete within `header_timeout`, counted
  // from the accept on a new connection and from the first byte of the
  // next request on a keep-alive one; its body within `body_timeout` of the
  // header's end. Past either the answer is 408 and the connection closes.
  // Between requests a keep-alive connection may be idle (nothing sent) for
  // `idle_timeout`; then it is closed without an answer. None of these
  // three runs while a request is handled, a response is written or
  // streamed, or once the connection is a WebSocket.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds idle_timeout{60'000};
  // While an answer is being written, the client must take at least
  // kSendProgressBytes of it (or the rest of what is being written) in every
  // `send_timeout`; one that does not is disconnected (logged
  // `http_slow_reader`). A streamed answer whose producer is silent owes
  // nothing. Zero turns it off.
  std::chrono::milliseconds send_timeout{60'000};
  // Open connections across every listener, WebSockets included. Past
  // `max_connections`, `reserve_connections` more are accepted for one
  // request each, served only if HttpHooks::reserved admits it (else 503);
  // past those a connection is answered 503 at once and closed.
  size_t max_connections = 1024;
  size_t reserve_connections = 16;
  // Bytes a WebSocket may have queued for its client. A client that stops
  // reading is disconnected (logged `ws_slow_reader`) once a send would
  // take its queue past this; one message into an empty queue always goes.
  uint64_t ws_queued_bytes = 16 << 20;
  // A WebSocket client that has sent nothing for `ws_ping_interval` is
  // pinged (again every interval while it stays silent); one that has sent
  // nothing at all, no frame and no pong, for `ws_idle_timeout` is closed
  // (logged `ws_idle_timeout`). Zero turns either off.
  std::chrono::milliseconds ws_ping_interval{30'000};
  std::chrono::milliseconds ws_idle_timeout{120'000};
};

struct HttpHooks {
  // After the header: an error to answer at once (the connection then
  // closes), or none, with the body limit for this request in `body_limit`.
  std::function<std::optional<ApiError>(const Header& header, uint64_t& body_limit)> admit;
  std::function<void(Request request, std::shared_ptr<Exchange> exchange)> handle;
  std::function<void(const Request& request, int status)> answered;  // metrics, logs
  // Whether a request arriving on a reserve connection (one accepted past
  // HttpLimits::max_connections) is served; null: none is (503).
  std::function<bool(const Header& header)> reserved;
};

class HttpServer final {
 public:
  HttpServer(boost::asio::io_context& io, HttpLimits limits, HttpHooks hooks);
  ~HttpServer();

  // "127.0.0.1:7419", "[::1]:0" (port 0: any): returns "http://host:port".
  sys::Result<std::string> ListenTcp(const std::string& host, uint16_t port);
  // A unix socket at `path` (replaced if a stale one is there): returns
  // "unix:<path>".
  sys::Result<std::string> ListenUnix(const std::string& path);
  void StopAccepting();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::api
