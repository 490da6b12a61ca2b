#include "mcp/stdio.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <functional>
#include <utility>

#include "api/log.h"
#include "api/serve.h"
#include "mcp/server.h"
#include "sys/fd.h"
#include "sys/json_text.h"

namespace cordon::mcp {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// Newline-delimited messages from stdin; `line` for each non-blank one,
// then `end` once (EOF or a read error).
class Lines {
 public:
  Lines(asio::io_context& io, std::function<void(std::string)> line, std::function<void()> end)
      : io_(io), stream_(io), line_(std::move(line)), end_(std::move(end)) {}
  ~Lines() {
    if (stream_.is_open()) stream_.release();  // stdin stays open: it is not this object's
  }

  void Start() {
    struct stat st {};
    boost::system::error_code ec;
    if (::fstat(STDIN_FILENO, &st) == 0 && !S_ISREG(st.st_mode)) {
      stream_.assign(STDIN_FILENO, ec);
      if (!ec) return ReadAsync();
    }
    ReadFile();
  }

 private:
  void ReadAsync() {
    stream_.async_read_some(asio::buffer(buffer_), [this](boost::system::error_code ec, size_t n) {
      if (ec) return Finish();
      Feed(n);
      ReadAsync();
    });
  }
  void ReadFile() {
    asio::post(io_, [this] {
      ssize_t n = ::read(STDIN_FILENO, buffer_, sizeof buffer_);
      if (n < 0 && errno == EINTR) return ReadFile();
      if (n <= 0) return Finish();
      Feed(static_cast<size_t>(n));
      ReadFile();
    });
  }
  void Feed(size_t n) {
    pending_.append(buffer_, n);
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string line = pending_.substr(start, nl - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") != std::string::npos) line_(std::move(line));
    }
    pending_.erase(0, start);
  }
  void Finish() {
    if (pending_.find_first_not_of(" \t\r") != std::string::npos) line_(std::move(pending_));
    pending_.clear();
    if (end_) std::exchange(end_, nullptr)();
  }

  asio::io_context& io_;
  asio::posix::stream_descriptor stream_;
  std::function<void(std::string)> line_;
  std::function<void()> end_;
  std::string pending_;
  char buffer_[65536];
};

}  // namespace

int ServeStdio(api::DaemonOptions options) {
  options.listen.clear();  // stdio only
  api::MoveIntoLeaf(options);
  asio::io_context io(1);
  asio::signal_set signals(io);
  api::AddStopSignals(signals);
  const std::string state_dir = options.state_dir;
  auto daemon = api::Daemon::Start(io, std::move(options));
  if (!daemon) {
    api::Log("error", "start_failed",
             {{"error", daemon.error().message()}, {"state_dir", state_dir}});
    return 1;
  }
  api::Log("info", "mcp_stdio", {{"state_dir", state_dir}});
  Server& server = (*daemon)->mcp();
  Connection connection;
  // Every write is from the loop; one write(2) per message keeps it whole.
  // A null response is a cancelled call's: nothing is sent for it.
  auto write = [](const json& message) {
    if (message.is_null()) return;
    (void)sys::WriteAll(STDOUT_FILENO, sys::JsonText(message) + "\n");
  };
  int status = 0;
  bool stopping = false;
  auto stop = [&](const char* why) {
    if (stopping) return;
    stopping = true;
    signals.cancel();
    api::Log("info", "stopping", {{"reason", why}});
    (*daemon)->Shutdown([&](bool all_dead) {
      status = all_dead ? 0 : 1;
      api::Log(all_dead ? "info" : "error", "stopped", {{"all_dead", all_dead}});
      io.stop();
    });
  };
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) stop("signal");
  });
  // stdin on the loop: a pipe, socket or terminal through epoll; a
  // regular file (which epoll refuses) read in chunks from the loop, as
  // reading one never blocks.
  Lines lines{io,
              [&](std::string line) {
                if (!stopping) server.HandleText(connection, line, write, write);
              },
              [&] { stop("stdin closed"); }};
  lines.Start();
  io.run();
  daemon->reset();
  api::IgnoreSignalsFromNowOn(signals);
  return status;
}

}  // namespace cordon::mcp
