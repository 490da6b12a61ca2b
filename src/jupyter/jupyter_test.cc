// The wire format, and a real ipykernel driven over ZeroMQ ipc sockets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <optional>
#include <set>
#include <string>

#include "jupyter/execute.h"
#include "jupyter/kernel_client.h"
#include "support.h"
#include "sys/epoll_reactor.h"
#include "sys/json_text.h"
#include "sys/timerfd.h"

namespace cordon::jupyter {
namespace {

TEST(WireTest, SignedMessagesRoundTripAndForgeriesAreDropped) {
  Message m = NewMessage("session-1", "execute_request", {{"code", "1+1"}});
  m.identities = {"peer"};
  m.buffers = {std::string("\0bin", 4)};
  auto frames = Serialize(m, "secret");
  ASSERT_EQ(frames.size(), 8u);
  EXPECT_EQ(frames[1], "<IDS|MSG>");
  EXPECT_EQ(frames[2].size(), 64u);
  auto parsed = Parse(frames, "secret");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->msg_type(), "execute_request");
  EXPECT_EQ(parsed->content["code"], "1+1");
  EXPECT_EQ(parsed->identities, std::vector<std::string>{"peer"});
  EXPECT_EQ(parsed->buffers, m.buffers);

  EXPECT_EQ(Parse(frames, "other key").error(), "bad signature");
  auto tampered = frames;
  tampered[6] = R"({"code":"import os"})";
  EXPECT_EQ(Parse(tampered, "secret").error(), "bad signature");
  auto forged = frames;
  forged[2][0] = forged[2][0] == 'a' ? 'b' : 'a';
  EXPECT_FALSE(Parse(forged, "secret"));
  EXPECT_FALSE(Parse({"no", "delimiter"}, "secret"));
  EXPECT_FALSE(Parse({"<IDS|MSG>", "sig"}, "secret"));
  // The signature is the HMAC-SHA256 of the four JSON parts (RFC 4231 case 2
  // checks the HMAC itself).
  EXPECT_EQ(Sign("Jefe", {"what do ya want ", "for nothing?"}),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(WireTest, SignReusesAKeyedContextWithoutCarryingState) {
  // Keyed contexts are cached per key (wire.cc): the same key again, other
  // keys in between, and the parts split differently all sign alike.
  const std::string want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Sign("Jefe", {"what do ya want ", "for nothing?"}), want);
    EXPECT_NE(Sign("other key", {"what do ya want ", "for nothing?"}), want);
    EXPECT_EQ(Sign("Jefe", {"what do ya ", "want for nothing?", ""}), want);
  }
  EXPECT_EQ(Sign("", {"anything"}), "");
  // More keys than the cache holds (it starts again): still right.
  for (int i = 0; i < 600; ++i) (void)Sign("key " + std::to_string(i), {"x"});
  EXPECT_EQ(Sign("Jefe", {"what do ya want for nothing?"}), want);
}

TEST(WireTest, IsoNowIsUtcWithMicroseconds) {
  const auto before = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  const std::string now = IsoNow();
  ASSERT_EQ(now.size(), 27u) << now;
  for (size_t i : {4, 7}) EXPECT_EQ(now[i], '-') << now;
  EXPECT_EQ(now[10], 'T');
  EXPECT_EQ(now[13], ':');
  EXPECT_EQ(now[16], ':');
  EXPECT_EQ(now[19], '.');
  EXPECT_EQ(now[26], 'Z');
  // Against gmtime_r, to the second (allowing the second to turn over).
  auto format = [](std::chrono::system_clock::time_point t) {
    std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return std::string(buf);
  };
  const std::string seconds = now.substr(0, 19);
  EXPECT_TRUE(seconds == format(before) || seconds == format(before + std::chrono::seconds(1)))
      << now << " against " << format(before);
}

TEST(ExecuteCollectorTest, CompleteOnlyWithItsOwnReplyAndIdle) {
  Message request = NewMessage("s", "execute_request", {{"code", "x"}});
  ExecuteCollector c(request.msg_id(), 1000);
  Message other = NewMessage("s", "execute_request", {});
  EXPECT_FALSE(
      c.Feed(Channel::kIopub, NewMessage("s", "status", {{"execution_state", "idle"}}, &other)));
  EXPECT_FALSE(c.Feed(Channel::kIopub,
                      NewMessage("s", "stream", {{"name", "stdout"}, {"text", "hi\n"}}, &request)));
  EXPECT_FALSE(c.Feed(
      Channel::kShell,
      NewMessage("s", "execute_reply", {{"status", "ok"}, {"execution_count", 3}}, &request)));
  EXPECT_TRUE(
      c.Feed(Channel::kIopub, NewMessage("s", "status", {{"execution_state", "idle"}}, &request)));
  ExecuteOutput out = c.Take();
  EXPECT_EQ(out.stdout_text, "hi\n");
  EXPECT_EQ(out.execution_count, 3);
  EXPECT_EQ(out.status, "ok");
}

TEST(ExecuteCollectorTest, OneBudgetForTextAndRichOutput) {
  Message request = NewMessage("s", "execute_request", {});
  ExecuteCollector c(request.msg_id(), 10);
  c.Feed(Channel::kIopub,
         NewMessage("s", "stream", {{"name", "stdout"}, {"text", "123456"}}, &request));
  c.Feed(Channel::kIopub,
         NewMessage("s", "display_data", {{"data", {{"text/plain", "a long payload"}}}}, &request));
  c.Feed(Channel::kIopub,
         NewMessage("s", "stream", {{"name", "stdout"}, {"text", "789abcdef"}}, &request));
  EXPECT_TRUE(c.over_budget());
  ExecuteOutput out = c.Take();
  EXPECT_TRUE(out.truncated);
  EXPECT_TRUE(out.results.empty());
  // The payload that did not fit ended the output: nothing after it is kept.
  EXPECT_EQ(out.stdout_text, "123456" + TruncationMarker(10));
  EXPECT_NE(out.stdout_text.find("truncated"), std::string::npos);
  EXPECT_EQ(out.bytes, 6u);  // the marker is not output
}

TEST(ExecuteCollectorTest, ItsOutputSaysHowManyBytesItKeptImagesIncluded) {
  Message request = NewMessage("s", "execute_request", {});
  ExecuteCollector c(request.msg_id(), 1 << 20);
  const std::string image(5000, 'A');
  c.Feed(Channel::kIopub,
         NewMessage("s", "stream", {{"name", "stdout"}, {"text", "hi\n"}}, &request));
  c.Feed(Channel::kIopub,
         NewMessage("s", "stream", {{"name", "stderr"}, {"text", "oops"}}, &request));
  c.Feed(Channel::kIopub,
         NewMessage("s", "display_data", {{"data", {{"image/png", image}}}}, &request));
  ExecuteOutput out = c.Take();
  ASSERT_EQ(out.results.size(), 1u);
  // The image's data is counted as the JSON text it is sent as.
  EXPECT_EQ(out.bytes, 3 + 4 + sys::JsonText(out.results[0]["data"]).size());
  EXPECT_GT(out.bytes, image.size());
}

// A real kernel, started directly (the daemon starts it inside a boundary).
class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveIpykernel()) GTEST_SKIP() << "Debian's python3-ipykernel is not installed";
    auto reactor = sys::EpollReactor::Create();
    ASSERT_TRUE(reactor);
    reactor_.emplace(std::move(*reactor));
    auto connection = WriteConnection(dir_ / "run", dir_ / "run");
    ASSERT_TRUE(connection) << connection.error().message();
    connection_ = *connection;
    kernel_ = ::fork();
    if (kernel_ == 0) {
      ::setsid();  // its own process group, as inside a boundary
      std::string log = dir_ / "kernel.log";
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl("/usr/bin/python3", "python3", "-m", "ipykernel_launcher", "-f",
              connection_.file.c_str(), nullptr);
      ::_exit(127);
    }
    auto client = KernelClient::Connect(
        *reactor_, context_, connection_,
        [this](Channel ch, const Message& m) {
          if (collector_) collector_->Feed(ch, m);
          if (ch == Channel::kShell && m.msg_type() == "kernel_info_reply") info_ = m.content;
          if (ch == Channel::kIopub) iopub_seen_ = true;
        },
        [this](Channel, const std::string& why) { dropped_.push_back(why); },
        [this] { ++heartbeats_; });
    ASSERT_TRUE(client) << client.error().message();
    client_ = std::move(*client);
    ASSERT_TRUE(WaitReady());
  }
  void TearDown() override {
    client_.reset();
    if (kernel_ > 0) {
      ::kill(kernel_, SIGKILL);
      ::waitpid(kernel_, nullptr, 0);
    }
  }
  // Runs the loop until `done` or `limit` passes.
  bool RunFor(std::chrono::milliseconds limit, const std::function<bool()>& done,
              const std::function<void()>& every_200ms = {}) {
    auto timer = sys::TimerFd::Create();
    bool expired = false;
    int ticks = 0;
    int max_ticks = static_cast<int>(limit.count() / 200);
    (void)timer->Arm(std::chrono::milliseconds(200));
    (void)reactor_->Watch(timer->fd(), [&] {
      timer->Consume();
      if (++ticks >= max_ticks) expired = true;
      if (every_200ms) every_200ms();
      (void)timer->Arm(std::chrono::milliseconds(200));
    });
    (void)reactor_->RunUntil([&] { return expired || done(); });
    reactor_->Unwatch(timer->fd());
    return done();
  }
  // kernel_info_request until a reply, and until iopub has delivered
  // something: a SUB socket misses what is published before it has joined.
  bool WaitReady() {
    auto ask = [this] {
      (void)client_->Send(Channel::kShell, client_->Make("kernel_info_request"));
    };
    ask();
    return RunFor(
        std::chrono::seconds(60), [this] { return !info_.is_null() && iopub_seen_; }, ask);
  }
  std::optional<ExecuteOutput> Execute(const std::string& code, size_t budget = 1 << 20,
                                       std::chrono::milliseconds limit = std::chrono::seconds(60),
                                       std::function<void()> then = {}) {
    // stop_on_error would have ipykernel abort the requests that arrive just
    // after an error (a KeyboardInterrupt included) instead of running them.
    Message request =
        client_->Make("execute_request", {{"code", code},
                                          {"silent", false},
                                          {"store_history", true},
                                          {"user_expressions", nlohmann::json::object()},
                                          {"allow_stdin", false},
                                          {"stop_on_error", false}});
    collector_.emplace(request.msg_id(), budget);
    EXPECT_TRUE(client_->Send(Channel::kShell, request));
    if (then) then();
    if (!RunFor(limit, [this] { return collector_->complete(); })) return std::nullopt;
    ExecuteOutput out = collector_->Take();
    collector_.reset();
    return out;
  }

  testing::TempDir dir_;
  std::optional<sys::EpollReactor> reactor_;
  ZmqContext context_;
  Connection connection_;
  pid_t kernel_ = -1;
  std::unique_ptr<KernelClient> client_;
  std::optional<ExecuteCollector> collector_;
  nlohmann::json info_;
  bool iopub_seen_ = false;
  std::vector<std::string> dropped_;
  int heartbeats_ = 0;
};

TEST_F(KernelTest, ExecutesAndCollectsEveryKindOfOutput) {
  EXPECT_EQ(info_["language_info"]["name"], "python");
  auto sum = Execute("1+1");
  ASSERT_TRUE(sum);
  EXPECT_EQ(sum->status, "ok");
  ASSERT_EQ(sum->results.size(), 1u);
  EXPECT_EQ(sum->results[0]["data"]["text/plain"], "2");

  auto printed = Execute("import sys\nprint('out')\nprint('err', file=sys.stderr)");
  ASSERT_TRUE(printed);
  EXPECT_EQ(printed->stdout_text, "out\n");
  EXPECT_EQ(printed->stderr_text, "err\n");

  auto shown = Execute("from IPython.display import display, HTML\ndisplay(HTML('<b>x</b>'))");
  ASSERT_TRUE(shown);
  ASSERT_EQ(shown->results.size(), 1u);
  EXPECT_EQ(shown->results[0]["data"]["text/html"], "<b>x</b>");

  auto failed = Execute("1/0");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, "error");
  EXPECT_EQ(failed->error["ename"], "ZeroDivisionError");
  EXPECT_FALSE(failed->error["traceback"].empty());

  auto assigned = Execute("x = 21");
  ASSERT_TRUE(assigned);
  EXPECT_EQ(assigned->status, "ok");
  auto kept = Execute("x * 2");
  ASSERT_TRUE(kept);
  ASSERT_EQ(kept->results.size(), 1u) << kept->status << " " << kept->stdout_text << " "
                                      << kept->error.dump() << " dropped " << dropped_.size();
  EXPECT_EQ(kept->results[0]["data"]["text/plain"], "42");
  EXPECT_GT(kept->execution_count.value_or(0), 1);
  EXPECT_TRUE(dropped_.empty());
}

TEST_F(KernelTest, AnInterruptBringsItBackToIdle) {
  auto interrupted =
      Execute("import time\ntime.sleep(100)", 1 << 20, std::chrono::seconds(60), [this] {
        // Let the sleep start, then SIGINT the kernel's group.
        RunFor(std::chrono::milliseconds(600), [] { return false; });
        ::kill(-kernel_, SIGINT);
      });
  ASSERT_TRUE(interrupted);
  EXPECT_EQ(interrupted->error["ename"], "KeyboardInterrupt");
  auto after = Execute("'alive'");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->results[0]["data"]["text/plain"], "'alive'");
}

TEST_F(KernelTest, OutputPastTheBudgetIsCut) {
  auto big = Execute("for i in range(2000): print('x' * 100)", 4096);
  ASSERT_TRUE(big);
  EXPECT_TRUE(big->truncated);
  EXPECT_LE(big->stdout_text.size(), 4096 + TruncationMarker(4096).size());
}

TEST_F(KernelTest, TheHeartbeatEchoes) {
  ASSERT_TRUE(client_->Ping());
  EXPECT_TRUE(RunFor(std::chrono::seconds(30), [this] { return heartbeats_ > 0; }));
}

// A kernel's ROUTER drops what it addresses to a client it has not met on
// that socket: the input_request of an input() reaches a client only once
// its stdin socket has finished its handshake, which on_connected reports
// (the daemon waits for it before a kernel is ready).
TEST_F(KernelTest, OnConnectedReportsEachRequestChannelThenInputReachesTheClient) {
  std::set<Channel> reported;
  std::optional<Message> input_request;
  ClientOptions options;
  options.on_connected = [&](Channel ch) { reported.insert(ch); };
  auto second = KernelClient::Connect(
      *reactor_, context_, connection_,
      [&](Channel ch, const Message& m) {
        if (ch == Channel::kStdin && m.msg_type() == "input_request") input_request = m;
      },
      [](Channel, const std::string&) {}, {}, options);
  ASSERT_TRUE(second) << second.error().message();
  KernelClient& client = **second;
  ASSERT_TRUE(RunFor(std::chrono::seconds(30), [&] { return client.connected(); }));
  for (Channel ch : {Channel::kShell, Channel::kControl, Channel::kStdin}) {
    EXPECT_TRUE(reported.contains(ch)) << ChannelName(ch);
  }
  EXPECT_FALSE(reported.contains(Channel::kHeartbeat));

  Message request = client.Make("execute_request", {{"code", "input('who? ')"},
                                                    {"silent", false},
                                                    {"store_history", false},
                                                    {"user_expressions", nlohmann::json::object()},
                                                    {"allow_stdin", true},
                                                    {"stop_on_error", false}});
  ASSERT_TRUE(client.Send(Channel::kShell, request));
  ASSERT_TRUE(RunFor(std::chrono::seconds(30), [&] { return input_request.has_value(); }));
  EXPECT_EQ(input_request->parent_msg_id(), request.msg_id());
  EXPECT_EQ(input_request->content.value("prompt", ""), "who? ");
  Message reply = client.Make("input_reply", {{"value", "cordon"}}, &*input_request);
  ASSERT_TRUE(client.Send(Channel::kStdin, reply));
}

}  // namespace
}  // namespace cordon::jupyter
