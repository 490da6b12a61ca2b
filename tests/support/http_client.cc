#include "http_client.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <stdexcept>
#include <variant>

namespace cordon::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct Target {
  bool unix_socket = false;
  std::string host;
  uint16_t port = 0;
  std::string path;
};

Target ParseUrl(const std::string& url) {
  Target t;
  if (url.starts_with("unix:")) {
    t.unix_socket = true;
    t.path = url.substr(5);
    return t;
  }
  std::string rest = url.substr(url.find("//") + 2);
  size_t colon = rest.rfind(':');
  t.host = rest.substr(0, colon);
  t.port = static_cast<uint16_t>(std::stoi(rest.substr(colon + 1)));
  return t;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

nlohmann::json HttpResponse::Json() const {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

std::string HttpResponse::Header(const std::string& name) const {
  auto it = headers.find(Lower(name));
  return it == headers.end() ? "" : it->second;
}

struct HttpClient::Impl {
  asio::io_context io;
  Target target;
  std::variant<std::monostate, asio::ip::tcp::socket, asio::local::stream_protocol::socket> socket;
  beast::flat_buffer buffer;

  template <typename F>
  auto WithSocket(F&& f) {
    if (auto* s = std::get_if<asio::ip::tcp::socket>(&socket)) return f(*s);
    return f(std::get<asio::local::stream_protocol::socket>(socket));
  }

  void Connect() {
    buffer.clear();
    if (target.unix_socket) {
      asio::local::stream_protocol::socket s(io);
      s.connect(asio::local::stream_protocol::endpoint(target.path));
      socket = std::move(s);
    } else {
      asio::ip::tcp::socket s(io);
      s.connect(asio::ip::tcp::endpoint(asio::ip::make_address(target.host), target.port));
      s.set_option(asio::ip::tcp::no_delay(true));
      socket = std::move(s);
    }
  }
};

HttpClient::HttpClient(std::string url, std::string token)
    : url_(std::move(url)), token_(std::move(token)), impl_(new Impl) {
  impl_->target = ParseUrl(url_);
}
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;

HttpResponse HttpClient::Request(const std::string& method, const std::string& target,
                                 const std::string& body,
                                 const std::map<std::string, std::string>& headers) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (std::holds_alternative<std::monostate>(impl_->socket)) impl_->Connect();
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "localhost");
    if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    req.keep_alive(true);
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 31);
    if (method == "HEAD") parser.skip(true);
    beast::error_code ec;
    impl_->WithSocket([&](auto& s) {
      http::write(s, req, ec);
      if (!ec) http::read(s, impl_->buffer, parser, ec);
      return 0;
    });
    if (ec) {
      // A keep-alive connection the server closed: retry once on a new one.
      impl_->socket = std::monostate{};
      if (attempt == 0) continue;
      throw std::runtime_error("HTTP " + method + " " + target + ": " + ec.message());
    }
    auto res = parser.release();
    HttpResponse out;
    out.status = static_cast<int>(res.result_int());
    out.body = std::move(res.body());
    for (const auto& field : res) {
      out.headers[Lower(std::string(field.name_string()))] = std::string(field.value());
    }
    if (!res.keep_alive()) impl_->socket = std::monostate{};
    return out;
  }
  return {};
}

RawConnection::RawConnection(const std::string& url) {
  Target t = ParseUrl(url);
  if (t.unix_socket) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", t.path.c_str());
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("connect");
    }
  } else {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(t.port);
    ::inet_pton(AF_INET, t.host.c_str(), &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("connect");
    }
  }
}

RawConnection::~RawConnection() { Close(); }

void RawConnection::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string RawConnection::ReadUntil(const std::string& needle, std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  char buf[4096];
  while (received_.find(needle) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd p = {fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) break;
    received_.append(buf, static_cast<size_t>(n));
  }
  return received_;
}

void RawConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace cordon::testing
