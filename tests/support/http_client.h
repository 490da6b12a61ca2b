// A small blocking HTTP/1.1 client for the daemon tests (Boost.Beast), over
// loopback TCP or a unix socket, with one keep-alive connection per client.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace cordon::testing {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lowercased
  nlohmann::json Json() const;
  std::string Header(const std::string& name) const;
};

class HttpClient final {
 public:
  // `url` is "http://127.0.0.1:PORT" or "unix:/path".
  HttpClient(std::string url, std::string token);
  ~HttpClient();
  HttpClient(HttpClient&&) noexcept;

  HttpResponse Request(const std::string& method, const std::string& target,
                       const std::string& body = "",
                       const std::map<std::string, std::string>& headers = {});
  HttpResponse Get(const std::string& target) { return Request("GET", target); }
  HttpResponse Post(const std::string& target, const nlohmann::json& body) {
    return Request("POST", target, body.dump(), {{"Content-Type", "application/json"}});
  }

  const std::string& token() const { return token_; }

 private:
  struct Impl;
  std::string url_;
  std::string token_;
  std::unique_ptr<Impl> impl_;
};

// Sends raw bytes on a fresh connection and returns the socket, for tests
// that read part of a response and hang up.
class RawConnection final {
 public:
  explicit RawConnection(const std::string& url);
  ~RawConnection();
  void Send(const std::string& bytes);
  // Reads until `needle` appears in what was received (or EOF / timeout).
  std::string ReadUntil(const std::string& needle, std::chrono::milliseconds within);
  void Close();

 private:
  int fd_ = -1;
  std::string received_;
};

}  // namespace cordon::testing
