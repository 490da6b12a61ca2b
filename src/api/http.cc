#include "api/http.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <iterator>
#include <limits>
#include <type_traits>

#include "api/log.h"
#include "sys/json_text.h"
#include "sys/text.h"

namespace cordon::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::atomic<uint64_t> next_request{1};

std::string NewRequestId() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "r-%x-%llx", static_cast<unsigned>(::getpid()),
                static_cast<unsigned long long>(next_request++));
  return buf;
}

// The open connections of one server, across its listeners, including the
// WebSockets they became. Only the loop's thread touches it.
struct Occupancy {
  size_t open = 0;
};

// One counted connection: it holds its place until Release (at its close)
// or its destruction, whichever comes first, and is moved along when an
// HTTP connection becomes a WebSocket.
class Slot final {
 public:
  Slot() = default;
  explicit Slot(std::shared_ptr<Occupancy> of) : of_(std::move(of)) {
    if (of_) ++of_->open;
  }
  Slot(Slot&& other) noexcept = default;  // leaves `other` empty
  Slot& operator=(Slot&& other) noexcept {
    if (this != &other) {
      Release();
      of_ = std::move(other.of_);
    }
    return *this;
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() { Release(); }
  void Release() {
    if (!of_) return;
    --of_->open;
    of_.reset();
  }

 private:
  std::shared_ptr<Occupancy> of_;
};

// How an accepted connection is served, decided at the accept.
enum class Admission {
  kServe,    // under the cap
  kReserve,  // in the reserve above it: one request, if HttpHooks::reserved admits it
  kRefuse,   // past the reserve: 503 at once, not counted, gone within LingerTime
};

// How long a connection answered before its request was read (401, 413,
// 431, 408, 503) may go on sending before it is closed: long enough for a
// client to read the answer, short enough that a client trickling bytes
// into it holds nothing.
milliseconds LingerTime(const HttpLimits& limits) {
  constexpr milliseconds kMax{2000};
  return limits.header_timeout > milliseconds::zero() ? std::min(limits.header_timeout, kMax)
                                                      : kMax;
}

std::string Millis(milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// One accepted WebSocket. Beast allows one read and one write operation in
// flight at a time, and an async_close and an async_ping count as writes;
// Pump is the only place that starts any of them, so they never overlap.
// (The pongs that answer a client's pings are Beast's own, sent from within
// the read under its internal write lock.)
//
// Ownership: a message write in flight owns `out_.front()` (Beast holds a
// pointer into its bytes) until its completion handler has run, and only
// that handler pops it. Nothing else may remove the front while `writing_` is
// kMessage: Ended() drops only what is queued behind it. Every handler holds
// `self`, so the session outlives its operations.
//
// Liveness: any frame from the client (a message, a ping, a pong) is
// Heard(). The timer pings a client silent for `ping_interval_` (the ping
// goes before queued messages, so that a client busy reading a flood is
// asked too) and ends a connection silent for `idle_timeout_`: a peer that
// vanished, or one that neither reads nor writes.
template <typename Socket>
class WebSocketSession final : public WebSocket,
                               public std::enable_shared_from_this<WebSocketSession<Socket>> {
 public:
  WebSocketSession(Socket socket, uint64_t max_message, const HttpLimits& limits, Slot slot,
                   std::vector<std::string> subprotocols)
      : ws_(std::move(socket)),
        subprotocols_(std::move(subprotocols)),
        timer_(ws_.get_executor()),
        max_queued_(limits.ws_queued_bytes),
        ping_interval_(limits.ws_ping_interval),
        idle_timeout_(limits.ws_idle_timeout),
        slot_(std::move(slot)) {
    ws_.read_message_max(max_message);
    ws_.auto_fragment(false);
    // Runs inside a read (which holds `self`); the stream is a member.
    ws_.control_callback([this](beast::websocket::frame_type, beast::string_view) { Heard(); });
  }

  void Accept(http::request<http::string_body> request,
              std::function<void(std::shared_ptr<WebSocket>)> accepted) {
    auto self = this->shared_from_this();
    auto req = std::make_shared<http::request<http::string_body>>(std::move(request));
    subprotocol_ = Agree(*req);
    ws_.set_option(beast::websocket::stream_base::decorator(
        [protocol = subprotocol_](beast::websocket::response_type& res) {
          res.set(http::field::server, "cordon");
          // Only one the client offered (RFC 6455 4.2.2): a client fails
          // the connection on any other.
          if (!protocol.empty()) res.set(http::field::sec_websocket_protocol, protocol);
        }));
    Heard();  // the upgrade request itself
    ArmTimer();
    ws_.async_accept(*req, [self, req, accepted = std::move(accepted)](beast::error_code ec) {
      if (ec) return self->Ended();
      self->open_ = true;
      accepted(self);
      self->Pump();  // a ping that fell due during the handshake
    });
  }

  void Start(Handlers handlers) override {
    if (ended_) {
      // Ended before anyone listened (the handshake's peer went away): the
      // closed handler is still owed its one call.
      if (handlers.closed) handlers.closed();
      return;
    }
    handlers_ = std::move(handlers);
    Read();
  }

  void Send(std::string text) override { Queue(std::move(text), false); }
  void SendBinary(std::string bytes) override { Queue(std::move(bytes), true); }
  const std::string& subprotocol() const override { return subprotocol_; }

  // Sends what is queued, then a close frame.
  void Close() override {
    if (ended_ || close_requested_) return;
    close_requested_ = true;
    Pump();
  }

 private:
  // The first of the server's subprotocols that the request offers, or "".
  // Offers are comma-separated tokens, in one header or several.
  std::string Agree(const http::request<http::string_body>& request) const {
    std::vector<std::string> offered;
    for (auto [it, end] = request.equal_range(http::field::sec_websocket_protocol); it != end;
         ++it) {
      for (std::string_view token :
           sys::SplitCommas(std::string_view(it->value().data(), it->value().size()))) {
        while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
          token.remove_prefix(1);
        }
        while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) {
          token.remove_suffix(1);
        }
        if (!token.empty()) offered.emplace_back(token);
      }
    }
    for (const std::string& ours : subprotocols_) {
      if (std::find(offered.begin(), offered.end(), ours) != offered.end()) return ours;
    }
    return "";
  }

  void Queue(std::string bytes, bool binary) {
    if (ended_ || close_requested_) return;
    // What waits behind the message being written: a message larger than
    // the bound (up to --max-message-size) is taken when nothing waits, so
    // a client that reads goes on getting what follows it.
    uint64_t waiting = queued_ - (writing_ == Writing::kMessage ? out_.front().bytes.size() : 0);
    if (waiting > 0 && waiting + bytes.size() > max_queued_) {
      // The client does not read what it is sent: the queue would grow
      // with the producer (a kernel's output) until the daemon ran out of
      // memory. It goes, whatever produced the output goes on.
      Log("warning", "ws_slow_reader",
          {{"queued_bytes", queued_}, {"message_bytes", bytes.size()}, {"limit", max_queued_}});
      return Ended();
    }
    queued_ += bytes.size();
    out_.push_back(Outgoing{std::move(bytes), binary});
    Pump();
  }

  void Read() {
    auto self = this->shared_from_this();
    ws_.async_read(buffer_, [self](beast::error_code ec, size_t) {
      if (ec) return self->Ended();
      self->Heard();
      std::string data = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      // The handler may Send, Close, or drop its last reference to this
      // session; `self` keeps it alive until this handler returns.
      if (self->ws_.got_binary() && self->handlers_.binary) {
        self->handlers_.binary(std::move(data));
      } else if (self->handlers_.message) {
        self->handlers_.message(std::move(data));
      }
      if (!self->ended_) self->Read();
    });
  }

  void Pump() {
    if (writing_ != Writing::kNone || ended_ || !open_) return;
    auto self = this->shared_from_this();
    if (ping_due_ && !close_sent_) {
      ping_due_ = false;
      writing_ = Writing::kPing;
      // Beast copies the (empty) payload into its frame at once.
      ws_.async_ping({}, [self](beast::error_code ec) {
        self->writing_ = Writing::kNone;
        if (ec) return self->Ended();
        self->Pump();
      });
      return;
    }
    if (!out_.empty()) {
      writing_ = Writing::kMessage;
      ws_.binary(out_.front().binary);
      ws_.async_write(asio::buffer(out_.front().bytes), [self](beast::error_code ec, size_t) {
        self->writing_ = Writing::kNone;
        self->queued_ -= self->out_.front().bytes.size();
        self->out_.pop_front();  // the buffer this write owned; see the class comment
        if (ec) return self->Ended();
        self->Pump();
      });
      return;
    }
    if (close_requested_ && !close_sent_) {
      close_sent_ = true;
      writing_ = Writing::kClose;
      ws_.async_close(beast::websocket::close_code::normal, [self](beast::error_code) {
        self->writing_ = Writing::kNone;
        self->Ended();
      });
    }
  }

  void Heard() {
    last_heard_ = Clock::now();
    next_ping_ = last_heard_ + ping_interval_;
  }

  // One wait at a time: armed by Accept, then only by its own handler; it
  // wakes at the next ping or the idle deadline, whichever comes first, and
  // sees what Heard() moved since.
  void ArmTimer() {
    const bool pings = ping_interval_ > milliseconds::zero();
    const bool idles = idle_timeout_ > milliseconds::zero();
    if (ended_ || (!pings && !idles)) return;
    Clock::time_point at = Clock::time_point::max();
    if (pings) at = next_ping_;
    if (idles) at = std::min(at, last_heard_ + idle_timeout_);
    timer_.expires_at(at);
    auto self = this->shared_from_this();
    timer_.async_wait([self](beast::error_code ec) {
      if (ec || self->ended_) return;
      self->OnTimer();
    });
  }

  void OnTimer() {
    const auto now = Clock::now();
    if (idle_timeout_ > milliseconds::zero() && now - last_heard_ >= idle_timeout_) {
      Log("info", "ws_idle_timeout",
          {{"silent_ms", std::chrono::duration_cast<milliseconds>(now - last_heard_).count()},
           {"limit_ms", idle_timeout_.count()}});
      return Ended();
    }
    if (ping_interval_ > milliseconds::zero() && now >= next_ping_) {
      next_ping_ = now + ping_interval_;
      ping_due_ = true;
      Pump();
    }
    ArmTimer();
  }

  // The connection is over, either way. Safe while a read or a write is in
  // flight: closing the socket makes them complete (with an error) later.
  void Ended() {
    if (ended_) return;
    ended_ = true;
    if (writing_ == Writing::kMessage) {
      out_.erase(std::next(out_.begin()), out_.end());  // the front is the write's
      queued_ = out_.front().bytes.size();
    } else {
      out_.clear();
      queued_ = 0;
    }
    timer_.cancel();
    slot_.Release();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).close(ignored);
    auto closed = std::move(handlers_.closed);
    handlers_ = {};
    if (closed) closed();
  }

  // Which write is in flight, if one is.
  enum class Writing { kNone, kMessage, kPing, kClose };
  struct Outgoing {
    std::string bytes;
    bool binary = false;  // a binary frame, else a text one
  };

  beast::websocket::stream<Socket> ws_;
  const std::vector<std::string> subprotocols_;  // the server's, preferred first
  std::string subprotocol_;                      // the one agreed, or ""
  asio::steady_timer timer_;                     // pings and the idle deadline; see ArmTimer
  beast::flat_buffer buffer_;                    // the read in flight's
  std::deque<Outgoing> out_;  // front: the write in flight's, while writing_ is kMessage
  uint64_t queued_ = 0;       // bytes in out_
  const uint64_t max_queued_;
  const milliseconds ping_interval_;
  const milliseconds idle_timeout_;
  Clock::time_point last_heard_;  // the last frame from the client
  Clock::time_point next_ping_;   // when a silent client is pinged next
  Slot slot_;                     // its place among the server's connections
  Handlers handlers_;
  Writing writing_ = Writing::kNone;
  bool open_ = false;      // the handshake is done: writes may start
  bool ping_due_ = false;  // Pump sends a ping next
  bool close_requested_ = false;
  bool close_sent_ = false;
  bool ended_ = false;
};

// One HTTP connection. Its timer bounds what the client owes: the header
// (from the accept, or from the first byte of a later request), the body,
// the idle time between requests, and a linger; it is disarmed while a
// request is handled and while an answer is written or streamed, which take
// as long as they take.
template <typename Socket>
class Connection final : public Exchange, public std::enable_shared_from_this<Connection<Socket>> {
 public:
  Connection(Socket socket, const HttpLimits& limits, const HttpHooks& hooks, Admission admission,
             Slot slot)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        limits_(limits),
        hooks_(hooks),
        admission_(admission),
        slot_(std::move(slot)) {}

  void Start() {
    if (admission_ == Admission::kRefuse) {
      // Nothing is read: the answer goes out at once, then Linger.
      request_.id = NewRequestId();
      request_.received = Clock::now();
      return OverCapacity();
    }
    ReadHeader();
  }

  void Respond(int status, std::string body, std::string content_type, Headers headers,
               std::optional<uint64_t> content_length) override {
    if (responded_) return;
    responded_ = true;
    StopWatching();
    if (hooks_.answered) hooks_.answered(request_, status);
    if (closed_) return;
    auto res =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "cordon");
    res->set("X-Request-Id", request_.id);
    if (!content_type.empty()) res->set(http::field::content_type, content_type);
    for (auto& [name, value] : headers) res->set(name, value);
    res->keep_alive(keep_alive_);
    if (request_.message.method() == http::verb::head && !content_length) {
      // What a GET would get, without its body.
      content_length = body.size();
      body.clear();
    }
    res->body() = std::move(body);
    if (content_length) {
      res->content_length(*content_length);
    } else {
      res->prepare_payload();
    }
    auto serializer = std::make_shared<http::response_serializer<http::string_body>>(*res);
    ExpectSending();
    WriteResponse(std::move(res), std::move(serializer));
  }

  void BeginStream(int status, std::string content_type) override {
    if (responded_) return;
    responded_ = true;
    streaming_ = true;
    if (hooks_.answered) hooks_.answered(request_, status);
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                       std::string(http::obsolete_reason(static_cast<http::status>(status))) +
                       "\r\nServer: cordon\r\nContent-Type: " + content_type +
                       "\r\nTransfer-Encoding: chunked\r\nX-Request-Id: " + request_.id +
                       "\r\nConnection: " + (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n";
    Queue(std::move(head));
  }

  void Stream(std::string data) override {
    if (!streaming_ || data.empty()) return;
    char size[20];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    Queue(size + std::move(data) + "\r\n");
  }

  void EndStream() override {
    if (!streaming_ || stream_ended_) return;
    stream_ended_ = true;
    Queue("0\r\n\r\n");
  }

  void UpgradeWebSocket(uint64_t max_message,
                        std::function<void(std::shared_ptr<WebSocket>)> accepted,
                        std::vector<std::string> subprotocols) override {
    if (responded_ || closed_) return;
    responded_ = true;
    Expect(Waiting::kNothing, {});
    StopWatching();
    if (hooks_.answered) hooks_.answered(request_, 101);
    // The socket, and its place among the open connections, are the
    // WebSocket's from here on; this connection is done.
    closed_ = true;
    auto ws = std::make_shared<WebSocketSession<Socket>>(std::move(socket_), max_message, limits_,
                                                         std::move(slot_), std::move(subprotocols));
    ws->Accept(std::move(request_.message), std::move(accepted));
  }

  void WatchClient(std::function<void()> gone) override {
    gone_ = std::move(gone);
    if (closed_) return Gone();
    // Bytes already buffered are a pipelined request: then the client is
    // there, and it cannot be told apart from a hang-up by peeking.
    if (buffer_.size() > 0) return;
    watching_ = true;
    auto self = this->shared_from_this();
    socket_.async_wait(Socket::wait_read, [self](beast::error_code ec) {
      if (ec || !self->watching_) return;
      self->watching_ = false;
      char byte;
      ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) self->Gone();
    });
  }

 private:
  // What the timer is waiting for.
  enum class Waiting { kNothing, kIdle, kHeader, kBody, kLinger, kSend };

  // Arms the timer for `what` (kNothing, or a zero `within`: disarms it).
  // The epoch tells a handler whose wait was replaced (an expiry already
  // queued cannot be cancelled) that it is stale.
  void Expect(Waiting what, milliseconds within) {
    waiting_ = what;
    timed_out_ = false;
    ++timer_epoch_;
    if (what == Waiting::kNothing || within <= milliseconds::zero()) {
      timer_.cancel();
      return;
    }
    timer_.expires_after(within);
    auto self = this->shared_from_this();
    timer_.async_wait([self, epoch = timer_epoch_](beast::error_code ec) {
      if (ec || epoch != self->timer_epoch_ || self->closed_) return;
      self->Expired();
    });
  }

  void Expired() {
    switch (waiting_) {
      case Waiting::kNothing:
        return;
      case Waiting::kIdle:
      case Waiting::kLinger:
        return Close();  // quietly: nothing is owed to the client
      case Waiting::kSend:
        return SendChecked();
      case Waiting::kHeader:
      case Waiting::kBody: {
        // The read in flight completes with operation_aborted; OnHeader or
        // OnBody then answers 408.
        timed_out_ = true;
        beast::error_code ignored;
        socket_.cancel(ignored);
        return;
      }
    }
  }

  // An answer, or a piece of a stream, is being written: the client now owes
  // progress. This ends whatever the request owed (an answer to a header
  // refused while its body was due). (The 100 Continue, written while the
  // body is due, is not counted: the body's timeout bounds it.)
  void ExpectSending() {
    if (waiting_ == Waiting::kSend) return;  // counting already
    taken_at_check_ = Taken();
    writes_at_check_ = writes_done_;
    Expect(Waiting::kSend, limits_.send_timeout);
  }

  // One `send_timeout` has passed while sending: enough taken, or a write
  // finished, and the client gets another; nothing left to write (a stream
  // waiting on its producer), and it owes nothing; else it goes.
  void SendChecked() {
    if (!writing_) return Expect(Waiting::kNothing, {});
    const uint64_t taken = Taken();
    if (writes_done_ != writes_at_check_ || taken - taken_at_check_ >= kSendProgressBytes) {
      taken_at_check_ = taken;
      writes_at_check_ = writes_done_;
      return Expect(Waiting::kSend, limits_.send_timeout);
    }
    Log("warning", "http_slow_reader",
        {{"request_id", request_.id},
         {"taken_bytes", taken},
         {"taken_in_limit", taken - taken_at_check_},
         {"limit_ms", limits_.send_timeout.count()}});
    Close();
    if (streaming_) Gone();  // a streamed run is cancelled, as when the client hangs up
  }

  // Bytes of this connection's answers that have left the socket: what it
  // took, less what still waits in its send queue (unsent, or sent and not
  // acknowledged). The socket takes more only once a third of its buffer is
  // free, seconds apart for a slow reader; the queue drains as it reads.
  uint64_t Taken() {
    int queued = 0;
    if (::ioctl(socket_.native_handle(), SIOCOUTQ, &queued) != 0 || queued < 0) queued = 0;
    return sent_ - std::min<uint64_t>(sent_, static_cast<uint64_t>(queued));
  }

  // The answer in pieces, so that what the socket takes is counted. Each
  // write's handler owns the response and its serializer until it has run;
  // a Close meanwhile only makes that write fail.
  void WriteResponse(std::shared_ptr<http::response<http::string_body>> res,
                     std::shared_ptr<http::response_serializer<http::string_body>> serializer) {
    writing_ = true;
    auto self = this->shared_from_this();
    http::async_write_some(socket_, *serializer,
                           [self, res, serializer](beast::error_code ec, size_t n) {
                             self->sent_ += n;
                             if (ec || self->closed_) {
                               self->writing_ = false;
                               return self->Close();
                             }
                             if (!serializer->is_done())
                               return self->WriteResponse(res, serializer);
                             self->writing_ = false;
                             ++self->writes_done_;
                             if (!self->body_read_) return self->Linger();
                             if (!self->keep_alive_) return self->Close();
                             self->NextRequest();
                           });
  }

  void OverCapacity() {
    keep_alive_ = false;
    RespondJson(503,
                ToJson(ApiError{503, "over_capacity",
                                std::to_string(limits_.max_connections) +
                                    " connections are open, the limit (--max-connections): "
                                    "retry later, or raise --max-connections",
                                "", nullptr}),
                {{"Retry-After", "1"}});
  }

  void TimedOut(const char* what, milliseconds limit, const char* option) {
    Fail(408, "timeout",
         std::string("the request ") + what + " did not arrive within " + Millis(limit) + " (" +
             option + "): send it at once, or raise " + option);
  }

  // After an answer on a keep-alive connection: bytes already buffered
  // are the next request (pipelined), whose header is due now; otherwise
  // the connection may be idle for the idle timeout, and the header timer
  // starts with the first byte.
  void NextRequest() {
    if (closed_) return;
    if (buffer_.size() > 0) return ReadHeader();
    Expect(Waiting::kIdle, limits_.idle_timeout);
    auto self = this->shared_from_this();
    socket_.async_wait(Socket::wait_read, [self](beast::error_code ec) {
      if (ec || self->closed_) return;
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    if (closed_) return;
    Expect(Waiting::kHeader, limits_.header_timeout);
    parser_.emplace();
    parser_->header_limit(limits_.header_bytes);
    // Beast checks a Content-Length against the body limit while parsing
    // the header; the limit depends on the route, so it is set (and a
    // declared length checked) once the header is in. (Not boost::none:
    // Beast 1.74 then compares a length with an empty optional, and fails.)
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    responded_ = streaming_ = stream_ended_ = body_read_ = false;
    gone_ = nullptr;
    auto self = this->shared_from_this();
    http::async_read_header(socket_, buffer_, *parser_,
                            [self](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void Fail(int status, const std::string& code, const std::string& message) {
    keep_alive_ = false;
    RespondJson(status, ToJson(ApiError{status, code, message, "", nullptr}));
  }

  // A request Beast could not parse (a bad request line or field, a
  // Content-Length given twice or not a number, one with Transfer-Encoding,
  // a bad chunk) is answered 400, saying why, and the connection closes:
  // where a next request would start is unknown. One the client left
  // before it was whole has nobody to answer.
  bool Malformed(beast::error_code ec, const char* what) {
    if (ec.category() != http::make_error_code(http::error::bad_method).category()) return false;
    const auto e = static_cast<http::error>(ec.value());
    if (e < http::error::bad_line_ending || e > http::error::bad_obs_fold) return false;
    Fail(400, "malformed", std::string("the request ") + what + " is malformed: " + ec.message());
    return true;
  }

  void OnHeader(beast::error_code ec) {
    request_ = Request{};
    request_.id = NewRequestId();
    request_.received = std::chrono::steady_clock::now();
    if (ec && timed_out_) return TimedOut("header", limits_.header_timeout, "--header-timeout");
    if (ec == http::error::header_limit) {
      return Fail(431, "too_large",
                  "the request header is over " + std::to_string(limits_.header_bytes) + " bytes");
    }
    if (Malformed(ec, "header")) return;
    if (ec) return Close();
    keep_alive_ = parser_->get().keep_alive();
    if (admission_ == Admission::kReserve) {
      // One request per reserve connection, so that its place comes back.
      keep_alive_ = false;
      if (!hooks_.reserved || !hooks_.reserved(parser_->get().base())) return OverCapacity();
    }
    // The body is due within its own timeout (the 100 Continue included).
    Expect(Waiting::kBody, limits_.body_timeout);
    uint64_t limit = limits_.body_bytes;
    if (auto refused = hooks_.admit(parser_->get().base(), limit)) {
      keep_alive_ = false;
      return RespondError(*refused);
    }
    if (auto length = parser_->content_length(); length && *length > limit) {
      return Fail(413, "too_large",
                  "the body is " + std::to_string(*length) + " bytes, over the limit of " +
                      std::to_string(limit));
    }
    parser_->body_limit(limit);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      // curl asks before sending a body over 1 KiB; without an answer it
      // waits a second.
      auto self = this->shared_from_this();
      auto line = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(socket_, asio::buffer(*line),
                        [self, line, limit](beast::error_code ec, size_t) {
                          if (ec) return self->Close();
                          self->ReadBody(limit);
                        });
      return;
    }
    ReadBody(limit);
  }

  void ReadBody(uint64_t limit) {
    auto self = this->shared_from_this();
    http::async_read(socket_, buffer_, *parser_,
                     [self, limit](beast::error_code ec, size_t) { self->OnBody(ec, limit); });
  }

  void OnBody(beast::error_code ec, uint64_t limit) {
    body_read_ = !ec;
    if (ec && timed_out_) return TimedOut("body", limits_.body_timeout, "--body-timeout");
    Expect(Waiting::kNothing, {});  // handling takes as long as it takes
    if (ec == http::error::body_limit) {
      return Fail(413, "too_large", "the body is over the limit of " + std::to_string(limit));
    }
    if (Malformed(ec, "body")) return;
    if (ec) return Close();
    request_.message = parser_->release();
    std::string target(request_.message.target());
    size_t q = target.find('?');
    request_.path = target.substr(0, q);
    request_.query = q == std::string::npos ? "" : target.substr(q + 1);
    // The handler takes the body (up to --max-file-size); the connection
    // keeps the header, for the logs and the answer.
    Request handed{request_.id, request_.received, std::move(request_.message), request_.path,
                   request_.query};
    request_.message = http::request<http::string_body>(handed.message.base());
    hooks_.handle(std::move(handed), this->shared_from_this());
  }

  void Queue(std::string bytes) {
    if (closed_) return;
    queue_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      if (stream_ended_) {
        StopWatching();
        if (keep_alive_) {
          NextRequest();
        } else {
          Close();
        }
      }
      return;
    }
    writing_ = true;
    ExpectSending();
    auto self = this->shared_from_this();
    // The completion condition sees each piece the socket took: counted.
    auto counted = [self, counted = size_t{0}](const beast::error_code& ec, size_t n) mutable {
      self->sent_ += n - counted;
      counted = n;
      return asio::transfer_all()(ec, n);
    };
    asio::async_write(socket_, asio::buffer(queue_.front()), std::move(counted),
                      [self](beast::error_code ec, size_t) {
                        self->queue_.pop_front();  // the buffer this write owned
                        if (ec || self->closed_) {
                          self->writing_ = false;
                          self->Close();
                          return self->Gone();
                        }
                        ++self->writes_done_;
                        self->WriteNext();
                      });
  }

  void StopWatching() {
    if (!watching_) return;
    watching_ = false;
    beast::error_code ignored;
    socket_.cancel(ignored);
  }

  void Gone() {
    if (!gone_) return;
    auto gone = std::move(gone_);
    gone_ = nullptr;
    gone();
  }

  // After answering a request whose body was not read (401, 413, 431, 408,
  // 503): stop sending, and read and drop what the client is still sending
  // (bounded in bytes and by LingerTime) before closing, so that it gets to
  // read the answer instead of a reset.
  void Linger() {
    if (closed_) return;
    // Done with: like a refused connection it no longer counts, and it is
    // gone within LingerTime.
    slot_.Release();
    Expect(Waiting::kLinger, LingerTime(limits_));
    beast::error_code ignored;
    socket_.shutdown(Socket::shutdown_send, ignored);
    Drain(std::make_shared<std::array<char, 1 << 16>>(), uint64_t{64} << 20);
  }

  void Drain(std::shared_ptr<std::array<char, 1 << 16>> buf, uint64_t budget) {
    auto self = this->shared_from_this();
    socket_.async_read_some(asio::buffer(*buf),
                            [self, buf, budget](beast::error_code ec, size_t n) {
                              if (ec || n >= budget) return self->Close();
                              self->Drain(buf, budget - n);
                            });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    slot_.Release();
    timer_.cancel();
    // A write in flight owns the front of the queue until its handler pops it.
    if (writing_ && !queue_.empty()) {
      queue_.erase(std::next(queue_.begin()), queue_.end());
    } else {
      queue_.clear();
    }
    beast::error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  Socket socket_;
  asio::steady_timer timer_;  // see Expect
  const HttpLimits& limits_;
  const HttpHooks& hooks_;
  const Admission admission_;
  Slot slot_;  // its place among the open connections, until Close (or the WebSocket's)
  Waiting waiting_ = Waiting::kNothing;
  uint64_t timer_epoch_ = 0;
  bool timed_out_ = false;    // the header's or body's deadline passed; the read was cancelled
  uint64_t sent_ = 0;         // bytes the socket took, all answers on this connection
  uint64_t writes_done_ = 0;  // writes finished (an answer, or a piece of a stream)
  uint64_t taken_at_check_ = 0, writes_at_check_ = 0;  // at the last ExpectSending or check
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Request request_;
  bool keep_alive_ = true;
  bool responded_ = false;
  bool streaming_ = false;
  bool stream_ended_ = false;
  bool body_read_ = false;
  bool writing_ = false;
  bool watching_ = false;
  bool closed_ = false;
  std::deque<std::string> queue_;
  std::function<void()> gone_;
};

template <typename Protocol>
class Listener final : public std::enable_shared_from_this<Listener<Protocol>> {
 public:
  Listener(asio::io_context& io, const HttpLimits& limits, const HttpHooks& hooks,
           std::shared_ptr<Occupancy> occupancy)
      : acceptor_(io),
        retry_(io),
        limits_(limits),
        hooks_(hooks),
        occupancy_(std::move(occupancy)) {}

  asio::basic_socket_acceptor<Protocol>& acceptor() { return acceptor_; }

  void Accept() {
    auto self = this->shared_from_this();
    acceptor_.async_accept([self](beast::error_code ec, typename Protocol::socket socket) {
      if (!self->acceptor_.is_open()) return;
      if (ec) return self->AcceptFailed(ec);
      self->failing_ = false;
      if constexpr (std::is_same_v<Protocol, asio::ip::tcp>) {
        // Answers go out at once: with Nagle's algorithm a response's last
        // segment waits for the client's delayed ACK (40 ms on Linux).
        beast::error_code ignored;
        socket.set_option(asio::ip::tcp::no_delay(true), ignored);
      }
      const size_t open = self->occupancy_->open;
      const size_t cap = self->limits_.max_connections;
      const Admission admission = open < cap ? Admission::kServe
                                  : open < cap + self->limits_.reserve_connections
                                      ? Admission::kReserve
                                      : Admission::kRefuse;
      Slot slot = admission == Admission::kRefuse ? Slot() : Slot(self->occupancy_);
      std::make_shared<Connection<typename Protocol::socket>>(
          std::move(socket), self->limits_, self->hooks_, admission, std::move(slot))
          ->Start();
      self->Accept();
    });
  }

  void Stop() {
    beast::error_code ignored;
    acceptor_.close(ignored);
    retry_.cancel();
  }

 private:
  // A connection the client reset before it was accepted is nothing; out of
  // descriptors (EMFILE, ENFILE) or memory, accepting again at once would
  // spin the loop, so it waits a little, and says so once per streak.
  void AcceptFailed(beast::error_code ec) {
    if (ec == asio::error::connection_aborted) return Accept();
    if (!failing_) {
      failing_ = true;
      Log("warning", "accept_failed",
          {{"error", ec.message()},
           {"open_connections", occupancy_->open},
           {"message",
            "accepting is paused for 100 ms at a time until it works again; if descriptors "
            "ran out, raise the open files limit (ulimit -n) or lower --max-connections"}});
    }
    retry_.expires_after(milliseconds(100));
    auto self = this->shared_from_this();
    retry_.async_wait([self](beast::error_code ec) {
      if (ec || !self->acceptor_.is_open()) return;
      self->Accept();
    });
  }

  asio::basic_socket_acceptor<Protocol> acceptor_;
  asio::steady_timer retry_;  // the pause after a failed accept
  const HttpLimits& limits_;
  const HttpHooks& hooks_;
  std::shared_ptr<Occupancy> occupancy_;  // shared by every listener of the server
  bool failing_ = false;                  // accept_failed was logged for this streak
};

}  // namespace

bool IsWebSocketUpgrade(const http::request<http::string_body>& request) {
  return beast::websocket::is_upgrade(request);
}

void Exchange::RespondJson(int status, const nlohmann::json& body, Headers headers) {
  Respond(status, sys::JsonText(body) + "\n", "application/json", std::move(headers));
}

void Exchange::RespondError(const ApiError& error) {
  Headers headers;
  if (error.status == 429) headers.emplace_back("Retry-After", "1");
  if (error.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  RespondJson(error.status, ToJson(error), std::move(headers));
}

struct HttpServer::Impl {
  asio::io_context& io;
  HttpLimits limits;
  HttpHooks hooks;
  std::shared_ptr<Occupancy> occupancy = std::make_shared<Occupancy>();
  std::vector<std::shared_ptr<Listener<tcp>>> tcp_listeners;
  std::vector<std::shared_ptr<Listener<unix_socket>>> unix_listeners;
};

HttpServer::HttpServer(asio::io_context& io, HttpLimits limits, HttpHooks hooks)
    : impl_(new Impl{io, limits, std::move(hooks)}) {}

HttpServer::~HttpServer() { StopAccepting(); }

sys::Result<std::string> HttpServer::ListenTcp(const std::string& host, uint16_t port) {
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return sys::Fail("listen: \"" + host + "\" is not an IP address", EINVAL);
  auto listener =
      std::make_shared<Listener<tcp>>(impl_->io, impl_->limits, impl_->hooks, impl_->occupancy);
  auto& a = listener->acceptor();
  tcp::endpoint endpoint(address, port);
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return sys::Fail("listen on " + host + ":" + std::to_string(port) + ": " + ec.message(),
                     ec.value());
  auto bound = a.local_endpoint();
  listener->Accept();
  impl_->tcp_listeners.push_back(listener);
  std::string shown = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                              : bound.address().to_string();
  return "http://" + shown + ":" + std::to_string(bound.port());
}

sys::Result<std::string> HttpServer::ListenUnix(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return sys::Fail("listen: " + path + " exists and is not a socket", EEXIST);
    ::unlink(path.c_str());  // a stale socket of an earlier daemon
  }
  auto listener = std::make_shared<Listener<unix_socket>>(impl_->io, impl_->limits, impl_->hooks,
                                                          impl_->occupancy);
  auto& a = listener->acceptor();
  beast::error_code ec;
  unix_socket::endpoint endpoint(path);
  a.open(endpoint.protocol(), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return sys::Fail("listen on unix:" + path + ": " + ec.message(), ec.value());
  // The token still guards it; the mode keeps other users from connecting.
  ::chmod(path.c_str(), 0600);
  listener->Accept();
  impl_->unix_listeners.push_back(listener);
  return "unix:" + path;
}

void HttpServer::StopAccepting() {
  for (auto& l : impl_->tcp_listeners) l->Stop();
  for (auto& l : impl_->unix_listeners) l->Stop();
}

}  // namespace cordon::api
