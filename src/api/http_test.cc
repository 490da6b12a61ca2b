// The WebSocket's write path against real clients over loopback: a client
// that goes away while a write is in flight, a server that closes with a
// queue, and a send after close. The first one is the double free a
// JupyterLab client found (the queue was cleared under an async_write).
#include "api/http.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <future>
#include <thread>

namespace cordon::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

// A server on its own loop thread. `on_socket` runs on that loop for each
// accepted WebSocket.
class WebSocketServer {
 public:
  explicit WebSocketServer(std::function<void(std::shared_ptr<WebSocket>)> on_socket,
                           HttpLimits limits = {})
      : on_socket_(std::move(on_socket)) {
    HttpHooks hooks;
    hooks.admit = [](const Header&, uint64_t&) { return std::optional<ApiError>(); };
    hooks.handle = [this](Request, std::shared_ptr<Exchange> ex) {
      ex->UpgradeWebSocket(1 << 20, on_socket_);
    };
    server_.emplace(io_, limits, std::move(hooks));
    auto url = server_->ListenTcp("127.0.0.1", 0);
    EXPECT_TRUE(url.has_value());
    port_ = url ? url->substr(url->rfind(':') + 1) : "0";
    thread_ = std::thread([this] { io_.run(); });
  }
  ~WebSocketServer() {
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

 private:
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{
      asio::make_work_guard(io_)};
  std::function<void(std::shared_ptr<WebSocket>)> on_socket_;
  std::optional<HttpServer> server_;
  std::string port_;
  std::thread thread_;
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

}  // namespace
}  // namespace cordon::api
