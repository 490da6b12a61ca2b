// The WebSocket's write path against real clients over loopback: a client
// that goes away while a write is in flight, a server that closes with a
// queue, and a send after close. The first one is the double free a
// JupyterLab client found (the queue was cleared under an async_write).
// Then the doors: read timeouts, the idle timeout, the connection cap and
// its reserve, and the WebSocket's pings and idle timeout, against raw
// clients on loopback with short limits.
#include "api/http.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "sys/fd.h"

namespace cordon::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

using namespace std::chrono_literals;

// An HTTP server on its own loop thread; `handle` runs on that loop for
// each request, `reserved` (if set) is HttpHooks::reserved.
class HttpTestServer {
 public:
  using Handle = std::function<void(Request, std::shared_ptr<Exchange>)>;
  explicit HttpTestServer(Handle handle, HttpLimits limits = {},
                          std::function<bool(const Header&)> reserved = nullptr)
      : handle_(std::move(handle)) {
    HttpHooks hooks;
    hooks.admit = [](const Header&, uint64_t&) { return std::optional<ApiError>(); };
    hooks.handle = [this](Request r, std::shared_ptr<Exchange> ex) {
      handle_(std::move(r), std::move(ex));
    };
    hooks.reserved = std::move(reserved);
    server_.emplace(io_, limits, std::move(hooks));
    auto url = server_->ListenTcp("127.0.0.1", 0);
    EXPECT_TRUE(url.has_value());
    port_ = url ? url->substr(url->rfind(':') + 1) : "0";
    thread_ = std::thread([this] { io_.run(); });
  }
  ~HttpTestServer() {
    asio::post(io_, [this] {
      server_->StopAccepting();
      work_.reset();
      io_.stop();
    });
    thread_.join();
  }
  // Runs `f` on the server's loop.
  void Post(std::function<void()> f) { asio::post(io_, std::move(f)); }
  const std::string& port() const { return port_; }
  asio::io_context& io() { return io_; }

 private:
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{
      asio::make_work_guard(io_)};
  Handle handle_;
  std::optional<HttpServer> server_;
  std::string port_;
  std::thread thread_;
};

// A server that upgrades every request. `on_socket` runs on its loop for
// each accepted WebSocket.
class WebSocketServer : public HttpTestServer {
 public:
  explicit WebSocketServer(std::function<void(std::shared_ptr<WebSocket>)> on_socket,
                           HttpLimits limits = {})
      : HttpTestServer(
            [on_socket = std::move(on_socket)](Request, std::shared_ptr<Exchange> ex) {
              ex->UpgradeWebSocket(1 << 20, on_socket);
            },
            limits) {}
};

struct Client {
  asio::io_context io;
  websocket::stream<tcp::socket> ws{io};

  explicit Client(const std::string& port) {
    tcp::resolver resolver(io);
    asio::connect(ws.next_layer(), resolver.resolve("127.0.0.1", port));
    ws.handshake("127.0.0.1", "/");
  }
  std::string Read() {
    beast::flat_buffer buffer;
    ws.read(buffer);
    return beast::buffers_to_string(buffer.data());
  }
};

// Waits (bounded) for a flag set on the server's loop.
bool WaitFor(const std::atomic<bool>& flag) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!flag && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return flag;
}

TEST(WebSocketTest, ClientGoneWhileAWriteIsInFlight) {
  std::atomic<int> closed{0};
  std::atomic<bool> ended{false};
  std::atomic<bool> queued{false};
  WebSocketServer server([&](std::shared_ptr<WebSocket> socket) {
    WebSocket::Handlers handlers;
    handlers.closed = [&] {
      ++closed;
      ended = true;
    };
    socket->Start(std::move(handlers));
    // Far more than the socket buffers hold: the client stops reading after
    // one message, so a write is in flight, blocked, when it goes away.
    for (int i = 0; i < 64; ++i) socket->Send(std::string(256 << 10, 'x'));
    queued = true;
  });
  {
    Client client(server.port());
    EXPECT_EQ(client.Read().size(), size_t{256} << 10);
    ASSERT_TRUE(WaitFor(queued));
    beast::error_code ignored;
    client.ws.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
    client.ws.next_layer().close(ignored);
  }
  ASSERT_TRUE(WaitFor(ended)) << "the server did not see the client go";
  EXPECT_EQ(closed.load(), 1);
  // The server goes on: a new client is served.
  Client again(server.port());
  EXPECT_EQ(again.Read().size(), size_t{256} << 10);
}

TEST(WebSocketTest, CloseSendsTheQueueFirstAndDropsLaterSends) {
  std::atomic<bool> ended{false};
  WebSocketServer server([&](std::shared_ptr<WebSocket> socket) {
    WebSocket::Handlers handlers;
    handlers.closed = [&] { ended = true; };
    socket->Start(std::move(handlers));
    for (int i = 0; i < 8; ++i) socket->Send("m" + std::to_string(i) + std::string(64 << 10, '.'));
    socket->Close();
    socket->Send("after close");  // must not start a write beside the close
    socket->Close();              // twice: no second close frame
  });
  Client client(server.port());
  for (int i = 0; i < 8; ++i) {
    std::string m = client.Read();
    EXPECT_TRUE(m.starts_with("m" + std::to_string(i))) << m.substr(0, 16);
  }
  beast::flat_buffer buffer;
  beast::error_code ec;
  client.ws.read(buffer, ec);
  EXPECT_EQ(ec, websocket::error::closed) << ec.message();
  EXPECT_EQ(client.ws.reason().code, websocket::close_code::normal);
  EXPECT_TRUE(WaitFor(ended));
}

TEST(WebSocketTest, AClientThatStopsReadingIsDisconnectedAtTheQueueLimit) {
  std::atomic<bool> ended{false};
  std::atomic<bool> all_sent{false};
  HttpLimits limits;
  limits.ws_queued_bytes = 1 << 20;
  WebSocketServer server(
      [&](std::shared_ptr<WebSocket> socket) {
        WebSocket::Handlers handlers;
        handlers.closed = [&] { ended = true; };
        socket->Start(std::move(handlers));
        // 16 MiB at once, to a client that reads nothing.
        for (int i = 0; i < 64; ++i) socket->Send(std::string(256 << 10, 'z'));
        all_sent = true;
      },
      limits);
  Client client(server.port());
  ASSERT_TRUE(WaitFor(all_sent));
  // Cut while it was being sent to (a send after the cut goes nowhere).
  EXPECT_TRUE(ended) << "a client that reads nothing was kept";
  // What reached the client before the cut is bounded by the limit plus
  // one message in flight (and the socket buffers): it ends early.
  size_t received = 0;
  beast::error_code ec;
  while (!ec) {
    beast::flat_buffer buffer;
    client.ws.read(buffer, ec);
    if (!ec) received += buffer.size();
  }
  EXPECT_LT(received, size_t{16} << 20);
}

TEST(WebSocketTest, ManyClientsLeavingMidFloodLeaveTheServerServing) {
  std::atomic<int> closed{0};
  WebSocketServer server([&](std::shared_ptr<WebSocket> socket) {
    WebSocket::Handlers handlers;
    // Weak: the session keeps its handlers, which must not keep it.
    handlers.message = [weak = std::weak_ptr<WebSocket>(socket)](std::string text) {
      auto socket = weak.lock();
      if (!socket) return;
      if (text == "flood") {
        for (int i = 0; i < 32; ++i) socket->Send(std::string(128 << 10, 'y'));
      } else {
        socket->Send("echo:" + text);
      }
    };
    handlers.closed = [&] { ++closed; };
    socket->Start(std::move(handlers));
  });
  for (int round = 0; round < 20; ++round) {
    Client client(server.port());
    client.ws.write(asio::buffer(std::string("flood")));
    EXPECT_EQ(client.Read().size(), size_t{128} << 10);
    beast::error_code ignored;
    client.ws.next_layer().close(ignored);  // mid flood, without a close frame
  }
  Client last(server.port());
  last.ws.write(asio::buffer(std::string("hello")));
  EXPECT_EQ(last.Read(), "echo:hello");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (closed < 20 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(closed.load(), 20);
}

// --- The doors: timeouts, the connection cap, WebSocket liveness. ---

bool Has(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// A blocking client of raw bytes over loopback; every read is bounded by a
// deadline, so that a server that never answers fails the test instead of
// hanging it.
class RawClient {
 public:
  explicit RawClient(const std::string& port)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ && ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  bool connected() const { return connected_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  struct Got {
    std::string bytes;
    bool eof = false;        // the server closed (or reset) the connection
    bool timed_out = false;  // the deadline passed first
  };

  // Reads until `done(bytes so far)` holds, the server closes, or `within`.
  Got ReadUntil(const std::function<bool(const std::string&)>& done,
                std::chrono::milliseconds within = 20s) {
    Got got;
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!done(got.bytes)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) {
        got.timed_out = true;
        break;
      }
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n <= 0) {
        got.eof = true;
        break;
      }
      got.bytes.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

  Got ReadToEnd(std::chrono::milliseconds within = 20s) {
    return ReadUntil([](const std::string&) { return false; }, within);
  }

  // One whole response: Content-Length, or chunked to its last chunk.
  Got ReadResponse(std::chrono::milliseconds within = 20s) {
    return ReadUntil(
        [](const std::string& b) {
          size_t end = b.find("\r\n\r\n");
          if (end == std::string::npos) return false;
          const std::string head = b.substr(0, end);
          if (Has(head, "Transfer-Encoding: chunked")) return b.ends_with("\r\n0\r\n\r\n");
          size_t at = head.find("Content-Length: ");
          if (at == std::string::npos) return true;
          return b.size() >= end + 4 + std::stoul(head.substr(at + 16));
        },
        within);
  }

  int fd() const { return fd_.get(); }

 private:
  sys::UniqueFd fd_;
  bool connected_ = false;
};

void Ok(Request request, std::shared_ptr<Exchange> ex) {
  ex->Respond(200, "ok:" + request.path, "text/plain");
}

// Timeouts short enough for a test, long ones where a test needs another
// timeout to be the one that fires.
HttpLimits Timeouts(std::chrono::milliseconds header, std::chrono::milliseconds body,
                    std::chrono::milliseconds idle) {
  HttpLimits limits;
  limits.header_timeout = header;
  limits.body_timeout = body;
  limits.idle_timeout = idle;
  return limits;
}

TEST(HttpTimeoutTest, AnIncompleteHeaderGets408AndTheConnectionCloses) {
  HttpTestServer server(Ok, Timeouts(200ms, 30s, 30s));
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /x HTTP/1.1\r\nHost: a\r\nX-Slow: "));  // never finished
  auto got = client.ReadToEnd();
  EXPECT_FALSE(got.timed_out) << "no answer to a header that never ended";
  EXPECT_TRUE(got.eof);
  EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 408 ")) << got.bytes;
  EXPECT_TRUE(Has(got.bytes, "Connection: close")) << got.bytes;
  EXPECT_TRUE(Has(got.bytes, "\"timeout\"")) << got.bytes;
  EXPECT_TRUE(Has(got.bytes, "--header-timeout")) << got.bytes;
}

TEST(HttpTimeoutTest, ANewConnectionThatSendsNothingGets408) {
  HttpTestServer server(Ok, Timeouts(200ms, 30s, 30s));
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  auto got = client.ReadToEnd();
  EXPECT_TRUE(got.eof);
  EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 408 ")) << got.bytes;
}

TEST(HttpTimeoutTest, ASlowBodyGets408) {
  HttpTestServer server(Ok, Timeouts(30s, 200ms, 30s));
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789"));
  auto got = client.ReadToEnd();
  EXPECT_TRUE(got.eof);
  EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 408 ")) << got.bytes;
  EXPECT_TRUE(Has(got.bytes, "--body-timeout")) << got.bytes;
}

TEST(HttpTimeoutTest, AnIdleKeepAliveConnectionIsClosedQuietly) {
  HttpTestServer server(Ok, Timeouts(30s, 30s, 200ms));
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /first HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto first = client.ReadResponse();
  ASSERT_TRUE(first.bytes.starts_with("HTTP/1.1 200 ")) << first.bytes;
  EXPECT_TRUE(first.bytes.ends_with("ok:/first"));
  auto rest = client.ReadToEnd();
  EXPECT_TRUE(rest.eof) << "an idle keep-alive connection was kept";
  EXPECT_EQ(rest.bytes, "") << "closed quietly, without an answer";
}

// Before, each was closed without an answer (and without a log line).
TEST(HttpMalformedTest, ARequestThatCannotBeParsedGets400SayingWhyAndNothingHandlesIt) {
  std::atomic<int> handled = 0;
  HttpTestServer server([&](Request r, std::shared_ptr<Exchange> ex) {
    ++handled;
    Ok(std::move(r), std::move(ex));
  });
  const std::pair<const char*, std::string> cases[] = {
      {"bad Content-Length",
       "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"},
      {"bad Content-Length", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"},
      {"bad Content-Length",
       "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"},
      {"bad chunk",
       "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
      {"bad method", "G(T /x HTTP/1.1\r\nHost: a\r\n\r\n"},
      {"bad version", "GET /x HTTP/9\r\nHost: a\r\n\r\n"},
      {"bad field", "GET /x HTTP/1.1\r\nHo st: a\r\n\r\n"},
  };
  for (const auto& [why, request] : cases) {
    RawClient client(server.port());
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(client.Send(request));
    auto got = client.ReadToEnd();
    EXPECT_TRUE(got.eof) << request;
    EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 400 ")) << request << "\n" << got.bytes;
    EXPECT_TRUE(Has(got.bytes, "\"malformed\"")) << got.bytes;
    EXPECT_TRUE(Has(got.bytes, why)) << why << " not in " << got.bytes;
    EXPECT_TRUE(Has(got.bytes, "Connection: close")) << got.bytes;
  }
  EXPECT_EQ(handled, 0);

  // After a good request on the same connection too; a client that leaves
  // mid-request is not answered.
  RawClient client(server.port());
  ASSERT_TRUE(client.Send("GET /first HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto first = client.ReadResponse();
  ASSERT_TRUE(first.bytes.starts_with("HTTP/1.1 200 ")) << first.bytes;
  ASSERT_TRUE(client.Send("GET /x HTTP/1.1\r\nHo st: a\r\n\r\n"));
  auto second = client.ReadToEnd();
  EXPECT_TRUE(second.bytes.starts_with("HTTP/1.1 400 ")) << second.bytes;
  RawClient leaving(server.port());
  ASSERT_TRUE(leaving.Send("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc"));
  ::shutdown(leaving.fd(), SHUT_WR);
  auto left = leaving.ReadToEnd();
  EXPECT_TRUE(left.eof);
  EXPECT_EQ(left.bytes, "");
}

TEST(HttpTimeoutTest, OnKeepAliveTheHeaderTimeoutStartsWithTheFirstByte) {
  HttpTestServer server(Ok, Timeouts(300ms, 30s, 30s));
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"));
  ASSERT_TRUE(client.ReadResponse().bytes.starts_with("HTTP/1.1 200 "));
  // Idle for three header timeouts: the idle timeout (30 s) applies, so
  // the next request is served.
  std::this_thread::sleep_for(900ms);
  ASSERT_TRUE(client.Send("GET /2 HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto second = client.ReadResponse();
  EXPECT_TRUE(second.bytes.starts_with("HTTP/1.1 200 ")) << second.bytes;
  // A request begun and not finished is held to the header timeout.
  ASSERT_TRUE(client.Send("GET /3 HTTP/1.1\r\n"));
  auto third = client.ReadToEnd();
  EXPECT_TRUE(third.eof);
  EXPECT_TRUE(third.bytes.starts_with("HTTP/1.1 408 ")) << third.bytes;
}

// Every timeout at 200 ms; a response streamed for a second, a request
// handled for a second, and the connection is still good after both.
TEST(HttpTimeoutTest, StreamedAndSlowResponsesOutlastEveryTimeout) {
  struct Ticker : std::enable_shared_from_this<Ticker> {
    Ticker(asio::io_context& io, std::shared_ptr<Exchange> ex) : timer(io), ex(std::move(ex)) {}
    asio::steady_timer timer;
    std::shared_ptr<Exchange> ex;
    int sent = 0;
    void Next() {
      timer.expires_after(100ms);
      timer.async_wait([self = shared_from_this()](beast::error_code) {
        if (self->sent == 10) return self->ex->EndStream();
        self->ex->Stream("line " + std::to_string(self->sent++) + "\n");
        self->Next();
      });
    }
  };
  std::atomic<HttpTestServer*> self{nullptr};
  HttpTestServer server(
      [&self](Request request, std::shared_ptr<Exchange> ex) {
        if (request.path == "/stream") {
          ex->BeginStream(200, "application/x-ndjson");
          std::make_shared<Ticker>(self.load()->io(), ex)->Next();
        } else if (request.path == "/slow") {
          auto timer = std::make_shared<asio::steady_timer>(self.load()->io(), 1s);
          timer->async_wait([timer, ex](beast::error_code) { ex->Respond(200, "slow", ""); });
        } else {
          Ok(std::move(request), std::move(ex));
        }
      },
      Timeouts(200ms, 200ms, 200ms));
  self = &server;
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto streamed = client.ReadResponse();
  ASSERT_FALSE(streamed.eof) << "the stream was cut: " << streamed.bytes;
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(Has(streamed.bytes, "line " + std::to_string(i) + "\n")) << streamed.bytes;
  }
  ASSERT_TRUE(client.Send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto slow = client.ReadResponse();
  ASSERT_FALSE(slow.eof) << "a request being handled was cut: " << slow.bytes;
  EXPECT_TRUE(slow.bytes.starts_with("HTTP/1.1 200 ")) << slow.bytes;
  EXPECT_TRUE(slow.bytes.ends_with("slow"));
  ASSERT_TRUE(client.Send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_TRUE(client.ReadResponse().bytes.ends_with("ok:/after"));
}

HttpLimits Cap(size_t max, size_t reserve) {
  HttpLimits limits;
  limits.max_connections = max;
  limits.reserve_connections = reserve;
  return limits;
}

bool Health(const Header& header) { return header.target() == "/health"; }

// A fresh connection whose request is answered 200 (`path`), retried until
// the deadline while the server is still giving a place back.
bool ServedAgain(const std::string& port, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    RawClient client(port);
    if (client.Send("GET " + path + " HTTP/1.1\r\nHost: a\r\n\r\n") &&
        client.ReadResponse().bytes.starts_with("HTTP/1.1 200 ")) {
      return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(HttpCapTest, PastTheCapANewConnectionGets503AndTheReserveServesReservedRequests) {
  HttpTestServer server(Ok, Cap(2, 1), Health);
  // Two keep-alive connections fill the cap (each served once, so counted).
  std::optional<RawClient> a(std::in_place, server.port());
  RawClient b(server.port());
  for (RawClient* c : {&*a, &b}) {
    ASSERT_TRUE(c->Send("GET /hold HTTP/1.1\r\nHost: a\r\n\r\n"));
    ASSERT_TRUE(c->ReadResponse().bytes.starts_with("HTTP/1.1 200 "));
  }
  {
    // The reserve: a reserved request is served, once.
    RawClient health(server.port());
    ASSERT_TRUE(health.Send("GET /health HTTP/1.1\r\nHost: a\r\n\r\n"));
    auto got = health.ReadToEnd();
    EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 200 ")) << got.bytes;
    EXPECT_TRUE(Has(got.bytes, "Connection: close")) << got.bytes;
    EXPECT_TRUE(got.eof);
  }
  {
    // Anything else on the reserve: 503.
    RawClient other(server.port());
    ASSERT_TRUE(other.Send("GET /other HTTP/1.1\r\nHost: a\r\n\r\n"));
    auto got = other.ReadToEnd();
    EXPECT_TRUE(got.eof);
    EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 503 ")) << got.bytes;
    EXPECT_TRUE(Has(got.bytes, "\"over_capacity\"")) << got.bytes;
    EXPECT_TRUE(Has(got.bytes, "--max-connections")) << got.bytes;
    EXPECT_TRUE(Has(got.bytes, "Retry-After: 1")) << got.bytes;
  }
  // The reserve held (by a connection that sends nothing; connections are
  // accepted in order), the next one is answered 503 before it says anything.
  std::optional<RawClient> held(std::in_place, server.port());
  RawClient refused(server.port());
  auto got = refused.ReadToEnd();
  EXPECT_TRUE(got.eof);
  EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 503 ")) << got.bytes;
  // Places come back as connections close. (A reserve connection counts
  // toward the cap too: with `held` open, closing `a` alone would leave
  // the server at its cap.)
  a.reset();
  held.reset();
  EXPECT_TRUE(ServedAgain(server.port(), "/again"));
}

TEST(HttpCapTest, AWebSocketCountsTowardTheCapWhileItIsOpen) {
  std::atomic<bool> ended{false};
  HttpTestServer server(
      [&](Request request, std::shared_ptr<Exchange> ex) {
        if (!IsWebSocketUpgrade(request.message)) return Ok(std::move(request), std::move(ex));
        ex->UpgradeWebSocket(1 << 20, [&](std::shared_ptr<WebSocket> socket) {
          WebSocket::Handlers handlers;
          handlers.closed = [&] { ended = true; };
          socket->Start(std::move(handlers));
        });
      },
      Cap(1, 0));
  auto client = std::make_unique<Client>(server.port());
  RawClient refused(server.port());
  auto got = refused.ReadToEnd();
  EXPECT_TRUE(got.bytes.starts_with("HTTP/1.1 503 ")) << got.bytes;
  beast::error_code ignored;
  client->ws.next_layer().close(ignored);
  ASSERT_TRUE(WaitFor(ended));
  EXPECT_TRUE(ServedAgain(server.port(), "/after"));
}

std::chrono::microseconds CpuTime() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto us = [](const timeval& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec);
  };
  return us(usage.ru_utime) + us(usage.ru_stime);
}

// Out of descriptors, accept fails (EMFILE) while the listening socket
// stays readable: accepting again at once would spin the loop. It pauses,
// and resumes once descriptors are back.
TEST(HttpCapTest, OutOfDescriptorsAcceptingPausesAndResumes) {
  HttpTestServer server(Ok);
  // The clients' sockets are made first: with the limit lowered, only the
  // server's accept needs a new descriptor.
  std::vector<sys::UniqueFd> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // RLIMIT_NOFILE bounds descriptor numbers: at the lowest free one, no
  // new descriptor can be made.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(server.port())));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (auto& c : clients) {
    // The handshake completes in the kernel's backlog, accepted or not.
    ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string request = "GET /back HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(::send(c.get(), request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
  }
  // A window to see the loop's CPU while every accept fails: a spinning
  // loop takes all of it, a paused one next to nothing.
  const auto cpu_before = CpuTime();
  std::this_thread::sleep_for(500ms);
  const auto cpu_used = CpuTime() - cpu_before;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_LT(cpu_used, 250ms) << "the loop spun on a failing accept";
  for (auto& c : clients) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{c.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(c.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200 "))
        << "not served once descriptors were back: " << got;
  }
}

// The handshake by hand, so that the client can then do nothing at all
// (not even answer a ping, which Beast's client would do).
bool RawHandshake(RawClient& client) {
  if (!client.Send("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n")) {
    return false;
  }
  auto got = client.ReadUntil([](const std::string& b) { return Has(b, "\r\n\r\n"); });
  return got.bytes.starts_with("HTTP/1.1 101 ");
}

// The opcodes of the (unmasked, server-sent) frames in `bytes`.
std::vector<int> Opcodes(const std::string& bytes) {
  std::vector<int> ops;
  size_t at = 0;
  while (at + 2 <= bytes.size()) {
    const auto b0 = static_cast<unsigned char>(bytes[at]);
    uint64_t len = static_cast<unsigned char>(bytes[at + 1]) & 0x7f;
    size_t head = 2;
    if (len == 126) {
      if (at + 4 > bytes.size()) break;
      len = (static_cast<unsigned char>(bytes[at + 2]) << 8) |
            static_cast<unsigned char>(bytes[at + 3]);
      head = 4;
    } else if (len == 127) {
      break;  // nothing this large is sent here
    }
    ops.push_back(b0 & 0x0f);
    at += head + len;
  }
  return ops;
}

TEST(WebSocketTest, APeerThatStopsAnsweringIsPingedThenClosed) {
  std::atomic<bool> ended{false};
  HttpLimits limits;
  limits.ws_ping_interval = 100ms;
  limits.ws_idle_timeout = 500ms;
  WebSocketServer server(
      [&](std::shared_ptr<WebSocket> socket) {
        WebSocket::Handlers handlers;
        handlers.closed = [&] { ended = true; };
        socket->Start(std::move(handlers));
      },
      limits);
  RawClient client(server.port());
  ASSERT_TRUE(RawHandshake(client));
  // Reads nothing, sends nothing.
  ASSERT_TRUE(WaitFor(ended)) << "a silent peer was kept";
  auto got = client.ReadToEnd();
  EXPECT_TRUE(got.eof);
  auto ops = Opcodes(got.bytes);
  EXPECT_GE(std::count(ops.begin(), ops.end(), 0x9), 1) << "no ping was sent";
}

TEST(WebSocketTest, AClientThatAnswersPingsOutlivesTheIdleTimeout) {
  std::atomic<bool> ended{false};
  HttpLimits limits;
  limits.ws_ping_interval = 50ms;
  limits.ws_idle_timeout = 300ms;
  std::atomic<WebSocketServer*> self{nullptr};
  WebSocketServer server(
      [&](std::shared_ptr<WebSocket> socket) {
        WebSocket::Handlers handlers;
        handlers.closed = [&] { ended = true; };
        socket->Start(std::move(handlers));
        // Five idle timeouts later: only pongs came from the client.
        auto timer = std::make_shared<asio::steady_timer>(self.load()->io(), 1500ms);
        timer->async_wait([timer, socket](beast::error_code) { socket->Send("late"); });
      },
      limits);
  self = &server;
  Client client(server.port());
  EXPECT_EQ(client.Read(), "late");  // Beast's read answers the pings meanwhile
  EXPECT_FALSE(ended);
}

}  // namespace
}  // namespace cordon::api
