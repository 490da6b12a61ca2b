// Quarantine needs a teardown that fails. The seam is here only: the daemon
// runs in this test process, constructed with an injected Signaller that
// can be switched to do nothing, and is talked to over real loopback HTTP.
// The cordon binary has no way to inject one.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "api/daemon.h"
#include "gateway/gateway.h"
#include "http_client.h"
#include "store/store.h"
#include "support.h"

namespace cordon::testing {
namespace {

using nlohmann::json;

class SwitchableSignaller final : public contain::Signaller {
 public:
  std::atomic<bool> broken{false};
  sys::Result<void> Signal(const sys::PidFd& process, int sig) override {
    if (broken) return {};
    return kernel_.Signal(process, sig);
  }
  sys::Result<void> KillCgroup(const contain::CgroupDir& group) override {
    if (broken) return {};
    return kernel_.KillCgroup(group);
  }

 private:
  contain::KernelSignaller kernel_;
};

struct InProcessOptions {
  // How often quarantined sessions and unreleased runs are retried.
  std::chrono::milliseconds tick{100};
  // How long a teardown waits to observe the tree's death.
  std::chrono::milliseconds verify_timeout{300};
  bool gateway = false;  // serve the Kernel Gateway's /api, as cordon-serve does
  size_t max_runs = 32;
  size_t max_sessions = 64;
  size_t max_kernels = 64;
};

class InProcessDaemon {
 public:
  InProcessDaemon(contain::Signaller& signaller, InProcessOptions options) {
    api::DaemonOptions o;
    o.state_dir = state_ / "state";
    o.listen = {"127.0.0.1:0"};
    o.cgroup_root = CgroupRoot();
    o.verify_timeout = options.verify_timeout;
    o.sessions.tick = options.tick;
    o.max_runs = options.max_runs;
    o.sessions.max_sessions = options.max_sessions;
    o.signaller = &signaller;
    o.bounds.min_isolation = contain::Isolation::kNone;  // its escapes run without
    o.gateway.max_kernels = options.max_kernels;
    if (options.gateway) o.extension = gateway::Maker(o.gateway);
    auto d = api::Daemon::Start(io_, o);
    if (!d) {
      error_ = d.error().message();
      return;
    }
    daemon_ = std::move(*d);
    url_ = daemon_->urls()[0];
    token_ = Slurp(daemon_->token_path());
    token_ = token_.substr(0, token_.find('\n'));
    thread_ = std::thread([this] { io_.run(); });
  }
  ~InProcessDaemon() {
    if (daemon_) Stop();
  }
  // Stops it as SIGTERM does; whether every process was verified dead.
  bool Stop() {
    bool all_dead = false;
    boost::asio::post(io_, [&] {
      daemon_->Shutdown([&](bool dead) {
        all_dead = dead;
        io_.stop();
      });
    });
    thread_.join();
    daemon_.reset();
    return all_dead;
  }
  const std::string& error() const { return error_; }
  std::string state_dir() const { return state_ / "state"; }
  HttpClient Client() const { return HttpClient(url_, token_); }

 private:
  TempDir state_;
  boost::asio::io_context io_;
  std::unique_ptr<api::Daemon> daemon_;
  std::thread thread_;
  std::string url_, token_, error_;
};

// A command whose `sleep` leaves its session and outlives it; it prints the
// sleep's pid. Without isolation, the test names it by its host pid.
constexpr const char* kEscape = "setsid sleep 300 & echo $!";

pid_t EscapeFrom(HttpClient& c, const std::string& session) {
  return std::stoi(c.Post("/v1/sessions/" + session + "/exec", {{"command", kEscape}})
                       .Json()["stdout"]
                       .get<std::string>());
}

// Polls `done` for up to `within`; its last answer.
template <typename F>
bool Eventually(F done, std::chrono::seconds within = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

std::string State(HttpClient& c, const std::string& session) {
  return c.Get("/v1/sessions/" + session).Json()["state"];
}

// Stops the daemon; whether it said all were dead, and whether the escapee
// (pinned by the test) had exited by then. One that had not is killed: it
// is the test's own.
std::pair<bool, bool> StopWith(InProcessDaemon& daemon, pid_t escapee, const sys::PidFd& pinned) {
  const bool all_dead = daemon.Stop();
  const bool exited = Exited(escapee);
  if (!exited) (void)contain::KernelSignaller().Signal(pinned, SIGKILL);
  return {all_dead, exited};
}

class DaemonQuarantineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = NoTreeWithoutIsolation(); !why.empty()) GTEST_SKIP() << why;
  }
  void StartDaemon(InProcessOptions options = {}) {
    daemon_.emplace(signaller_, options);
    ASSERT_TRUE(daemon_->error().empty()) << daemon_->error();
  }
  // Session `q`, without isolation, and the pid of what escapes from it.
  pid_t SessionWithEscapee(HttpClient& c) {
    EXPECT_EQ(c.Post("/v1/sessions", {{"id", "q"}, {"isolation", "none"}}).status, 201);
    return EscapeFrom(c, "q");
  }
  // A run without isolation whose sleep escapes it while signals do
  // nothing (they stay so): its answer, and the sleep's pid, pinned.
  struct EscapedRun {
    json result;
    pid_t escapee = 0;
    sys::PidFd pinned;
  };
  EscapedRun UnreleasedRun(HttpClient& c) {
    signaller_.broken = true;
    EscapedRun run{c.Post("/v1/runs", {{"shell", kEscape}, {"isolation", "none"}}).Json()};
    EXPECT_EQ(run.result["outcome"], "exited") << run.result;
    EXPECT_FALSE(run.result["release"]["dead"].get<bool>()) << run.result;
    run.escapee = std::stoi(run.result["stdout"].get<std::string>());
    auto pinned = sys::PidFd::Open(run.escapee);
    EXPECT_TRUE(pinned) << pinned.error().message();
    if (pinned) run.pinned = std::move(*pinned);
    return run;
  }

  SwitchableSignaller signaller_;
  std::optional<InProcessDaemon> daemon_;
};

TEST_F(DaemonQuarantineTest, AnUnverifiedTeardownQuarantinesBlocksARecreateAndSparesOthers) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  HttpClient c = daemon_->Client();
  pid_t escapee = SessionWithEscapee(c);
  ASSERT_EQ(c.Post("/v1/sessions", {{"id", "other"}}).status, 201);

  signaller_.broken = true;
  HttpResponse deleted = c.Request("DELETE", "/v1/sessions/q");
  EXPECT_EQ(deleted.status, 409) << deleted.body;
  EXPECT_EQ(deleted.Json()["error"]["code"], "quarantined");
  EXPECT_FALSE(deleted.Json()["error"]["survivors"].empty()) << deleted.body;
  EXPECT_FALSE(Exited(escapee));

  json q = c.Get("/v1/sessions/q").Json();
  EXPECT_EQ(q["state"], "quarantined");
  bool named = false;
  for (const auto& p : q["problem"]["survivors"]) named |= p.get<pid_t>() == escapee;
  EXPECT_TRUE(named) << q;
  HttpResponse recreate = c.Post("/v1/sessions", {{"id", "q"}});
  EXPECT_EQ(recreate.status, 409) << recreate.body;
  EXPECT_FALSE(recreate.Json()["error"]["survivors"].empty());
  EXPECT_EQ(c.Post("/v1/sessions/q/exec", {{"command", "true"}}).status, 409);
  EXPECT_NE(c.Get("/metrics").body.find("cordon_sessions_quarantined 1"), std::string::npos);

  // Other sessions are unaffected while the retries keep failing.
  for (int i = 0; i < 5; ++i) {
    json j =
        c.Post("/v1/sessions/other/exec", {{"command", "echo fine-" + std::to_string(i)}}).Json();
    EXPECT_EQ(j["stdout"], "fine-" + std::to_string(i) + "\n");
  }
  EXPECT_EQ(c.Post("/v1/sessions", {{"id", "third"}}).status, 201);
  EXPECT_EQ(c.Post("/v1/sessions/third/exec", {{"command", "echo ok"}}).Json()["stdout"], "ok\n");

  // Once a background retry succeeds, the session is closed and the id free.
  signaller_.broken = false;
  EXPECT_TRUE(Eventually([&] { return State(c, "q") == "closed"; })) << State(c, "q");
  EXPECT_TRUE(Exited(escapee));
  HttpResponse again = c.Post("/v1/sessions", {{"id", "q"}});
  EXPECT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(again.Json()["generation"], 2);
  EXPECT_EQ(c.Post("/v1/sessions/q/exec", {{"command", "echo back"}}).Json()["stdout"], "back\n");
}

// The count of verified-or-not teardowns in /metrics: each retry of a
// quarantine adds one when it resolves.
int Teardowns(HttpClient& c) {
  const std::string metrics = c.Get("/metrics").body;
  const std::string name = "cordon_teardown_seconds_count ";
  size_t at = metrics.find(name);
  return at == std::string::npos ? -1 : std::stoi(metrics.substr(at + name.size()));
}

// A shell ended by its command, a survivor left behind: the quarantine says
// why the runtime ended, and keeps saying it after retries that fail again.
TEST_F(DaemonQuarantineTest, AQuarantineKeepsSayingWhyItsRuntimeEnded) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  HttpClient c = daemon_->Client();
  pid_t escapee = SessionWithEscapee(c);

  signaller_.broken = true;
  json ended = c.Post("/v1/sessions/q/exec", {{"command", "exit 3"}}).Json();
  EXPECT_TRUE(ended["invalidated"].get<bool>()) << ended;
  json q = c.Get("/v1/sessions/q").Json();
  ASSERT_EQ(q["state"], "quarantined") << q;
  const std::string said = "the command ended the shell; then its teardown could not be verified";
  EXPECT_EQ(q["problem"].value("cause", ""), "the command ended the shell") << q;
  EXPECT_TRUE(q["problem"]["message"].get<std::string>().starts_with(said)) << q;

  // Two background retries resolve, both failing (the second one counted
  // means the first is done): the cause is still said.
  const int before = Teardowns(c);
  ASSERT_GE(before, 1);
  ASSERT_TRUE(Eventually([&] { return Teardowns(c) >= before + 2; }));
  q = c.Get("/v1/sessions/q").Json();
  EXPECT_EQ(q["state"], "quarantined");
  EXPECT_TRUE(q["problem"]["message"].get<std::string>().starts_with(said)) << q;
  HttpResponse recreate = c.Post("/v1/sessions", {{"id", "q"}});
  EXPECT_EQ(recreate.status, 409) << recreate.body;
  EXPECT_EQ(recreate.Json()["error"]["cause"], "the command ended the shell") << recreate.body;
  EXPECT_FALSE(Exited(escapee));

  signaller_.broken = false;
  EXPECT_TRUE(Eventually([&] { return State(c, "q") == "closed"; })) << State(c, "q");
  EXPECT_TRUE(Exited(escapee));
}

// What kept a quarantined session's processes alive is gone, and no
// background retry has come yet: the stop tries once more, closes it, and
// says all are dead.
TEST_F(DaemonQuarantineTest, AStopTriesAQuarantinedTeardownOnceMore) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({.tick = std::chrono::hours(1)}));  // no background retry
  HttpClient c = daemon_->Client();
  pid_t escapee = SessionWithEscapee(c);
  auto pinned = sys::PidFd::Open(escapee);
  ASSERT_TRUE(pinned) << pinned.error().message();
  signaller_.broken = true;
  HttpResponse deleted = c.Request("DELETE", "/v1/sessions/q");
  ASSERT_EQ(deleted.status, 409) << deleted.body;
  ASSERT_EQ(State(c, "q"), "quarantined");

  signaller_.broken = false;
  auto [all_dead, exited] = StopWith(*daemon_, escapee, *pinned);
  EXPECT_TRUE(all_dead);
  EXPECT_TRUE(exited);
}

// Whether GET /api/kernels lists the kernel `id`.
bool Listed(HttpClient& c, const std::string& id) {
  for (const auto& k : c.Get("/api/kernels").Json()) {
    if (k.value("id", "") == id) return true;
  }
  return false;
}

// A kernel started through the Kernel Gateway's /api, once it is ready;
// its id.
std::string ReadyKernel(HttpClient& c) {
  HttpResponse created = c.Post("/api/kernels", {{"name", "python3"}});
  EXPECT_EQ(created.status, 201) << created.body;
  const std::string id = created.Json().value("id", "");
  // A kernel's start under a sanitizer build and a loaded machine: well
  // within a minute.
  EXPECT_TRUE(Eventually([&] { return State(c, id) == "ready"; }, std::chrono::seconds(60)))
      << State(c, id);
  return id;
}

// A quarantined kernel counts against --max-kernels as it does against
// --max-sessions: its processes are still there.
TEST_F(DaemonQuarantineTest, AQuarantinedKernelIsHeldAgainstMaxKernels) {
  if (!HaveIpykernel()) GTEST_SKIP() << "python3-ipykernel is not installed";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({.gateway = true, .max_kernels = 1}));
  HttpClient c = daemon_->Client();
  const std::string id = ReadyKernel(c);
  ASSERT_FALSE(HasFailure());
  signaller_.broken = true;
  ASSERT_EQ(c.Request("DELETE", "/api/kernels/" + id).status, 409);
  ASSERT_EQ(State(c, id), "quarantined");
  EXPECT_TRUE(Listed(c, id));  // its processes are still there

  HttpResponse refused = c.Post("/api/kernels", {{"name", "python3"}});
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_EQ(refused.Json()["reason"], "Resource Limit");
  EXPECT_EQ(refused.Json()["message"],
            "at most 1 kernels may run at once (--max-kernels); 1 of them quarantined");

  signaller_.broken = false;
  EXPECT_TRUE(Eventually([&] { return State(c, id) == "closed"; })) << State(c, id);
  ReadyKernel(c);
}

// A quarantined session still has processes: it counts against
// --max-sessions until its teardown is verified.
TEST_F(DaemonQuarantineTest, AQuarantinedSessionIsHeldAgainstMaxSessions) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({.max_sessions = 1}));
  HttpClient c = daemon_->Client();
  pid_t escapee = SessionWithEscapee(c);
  signaller_.broken = true;
  ASSERT_EQ(c.Request("DELETE", "/v1/sessions/q").status, 409);

  HttpResponse refused = c.Post("/v1/sessions", {{"id", "other"}});
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.Json()["error"]["message"],
            "at most 1 sessions may be live at once (1 of them quarantined)");
  EXPECT_EQ(c.Get("/v1/sessions/other").status, 404);

  signaller_.broken = false;
  EXPECT_TRUE(Eventually([&] { return State(c, "q") == "closed"; })) << State(c, "q");
  EXPECT_TRUE(Exited(escapee));
  HttpResponse created = c.Post("/v1/sessions", {{"id", "other"}});
  EXPECT_EQ(created.status, 201) << created.body;
}

// A kernel being shut down is left out of the Kernel Gateway's list from
// the moment its DELETE arrives, though it is still held (and has its last
// state) until that answer: JupyterLab's KernelManager refreshes its list
// while the DELETE is under way, and takes a kernel listed there as
// running. The broken signaller holds the DELETE open for the test.
TEST_F(DaemonQuarantineTest, AKernelBeingShutDownIsNotListed) {
  if (!HaveIpykernel()) GTEST_SKIP() << "python3-ipykernel is not installed";
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({.verify_timeout = std::chrono::seconds(10), .gateway = true}));
  HttpClient c = daemon_->Client();
  const std::string id = ReadyKernel(c);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(Listed(c, id));

  signaller_.broken = true;
  std::atomic<int> deleted{0};
  std::thread deleter([&] {
    HttpClient own = daemon_->Client();
    deleted = own.Request("DELETE", "/api/kernels/" + id).status;
  });
  // The DELETE has arrived once the list leaves the kernel out; it cannot
  // be answered before the teardown's 10 s verification ends.
  EXPECT_TRUE(Eventually([&] { return !Listed(c, id); }));
  EXPECT_EQ(deleted, 0);
  EXPECT_EQ(c.Get("/api/kernels/" + id).status, 200);
  json held = c.Get("/v1/sessions/" + id).Json();
  EXPECT_EQ(held["state"], "ready") << held;
  EXPECT_TRUE(held["closing"].get<bool>()) << held;

  // Signals work again, too late for this teardown: the DELETE is told the
  // kernel is quarantined, and the next background retry closes it.
  signaller_.broken = false;
  deleter.join();
  EXPECT_EQ(deleted, 409);
  EXPECT_TRUE(Eventually([&] { return c.Get("/api/kernels/" + id).status == 404; }));
  EXPECT_FALSE(Listed(c, id));
  json closed = c.Get("/v1/sessions/" + id).Json();
  EXPECT_EQ(closed["state"], "closed") << closed;
  EXPECT_FALSE(closed["closing"].get<bool>()) << closed;
  EXPECT_TRUE(daemon_->Stop());
}

// The grant's state in the daemon's store, read as `cordon grants` does.
std::string GrantState(const std::string& state_dir, const std::string& id) {
  auto store = store::Store::Open(state_dir);
  if (!store) return store.error().message();
  auto grant = store->GetGrant(id);
  if (!grant || !*grant) return "not found";
  return (*grant)->state;
}

// Where a process works ("" if it cannot be read).
std::filesystem::path WorkingDirectory(pid_t pid) {
  std::error_code ec;
  auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
  return ec ? std::filesystem::path() : cwd;
}

int Health(HttpClient& c, const std::string& field) {
  return c.Get("/v1/health").Json()[field].get<int>();
}

// A run is answered with its teardown unverified: its grant stays active
// and its tree is torn down again in the background until it is dead; a
// stop tries once more.
TEST_F(DaemonQuarantineTest, ARunsUnverifiedTeardownIsRetriedUntilItsTreeIsDead) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  HttpClient c = daemon_->Client();
  auto [r, escapee, pinned] = UnreleasedRun(c);
  ASSERT_FALSE(HasFailure());
  const std::string grant = r["grant"]["id"];
  EXPECT_EQ(Health(c, "runs_unreleased"), 1);
  EXPECT_EQ(Health(c, "runs_active"), 0);
  EXPECT_NE(c.Get("/metrics").body.find("cordon_runs_unreleased 1"), std::string::npos);
  EXPECT_EQ(GrantState(daemon_->state_dir(), grant), "active");
  EXPECT_FALSE(Exited(escapee));
  // The run's workspace, the escapee's working directory, is kept for it.
  const std::filesystem::path workspace = WorkingDirectory(escapee);
  EXPECT_TRUE(workspace.string().starts_with(daemon_->state_dir() + "/scratch/")) << workspace;
  EXPECT_TRUE(std::filesystem::is_directory(workspace)) << workspace;
  // Other runs go on meanwhile.
  EXPECT_EQ(c.Post("/v1/runs", {{"shell", "echo fine"}}).Json()["stdout"], "fine\n");

  signaller_.broken = false;
  EXPECT_TRUE(Eventually([&] { return Health(c, "runs_unreleased") == 0; }));
  EXPECT_TRUE(Exited(escapee));
  EXPECT_EQ(GrantState(daemon_->state_dir(), grant), "released");
  EXPECT_FALSE(std::filesystem::exists(workspace)) << workspace;
  EXPECT_TRUE(daemon_->Stop());
}

// A run answered with its teardown unverified still has processes: it
// counts against --max-runs until its death is verified.
TEST_F(DaemonQuarantineTest, AnUnreleasedRunIsHeldAgainstMaxRuns) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({.max_runs = 1}));
  HttpClient c = daemon_->Client();
  auto [r, escapee, pinned] = UnreleasedRun(c);
  ASSERT_FALSE(HasFailure());

  HttpResponse refused = c.Post("/v1/runs", {{"shell", "echo fine"}});
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.Json()["error"]["message"],
            "at most 1 runs may be in progress at once (1 of them answered, their teardown not "
            "yet verified; it is retried in the background)");

  signaller_.broken = false;
  EXPECT_TRUE(Eventually([&] { return Health(c, "runs_unreleased") == 0; }));
  EXPECT_TRUE(Exited(escapee));
  HttpResponse ran = c.Post("/v1/runs", {{"shell", "echo fine"}});
  EXPECT_EQ(ran.status, 200) << ran.body;
  EXPECT_EQ(ran.Json()["stdout"], "fine\n");
}

TEST_F(DaemonQuarantineTest, AStopTriesARunsUnverifiedTeardownOnceMore) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({.tick = std::chrono::hours(1)}));  // no background retry
  HttpClient c = daemon_->Client();
  auto [r, escapee, pinned] = UnreleasedRun(c);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(Health(c, "runs_unreleased"), 1);

  signaller_.broken = false;
  auto [all_dead, exited] = StopWith(*daemon_, escapee, pinned);
  EXPECT_TRUE(all_dead);
  EXPECT_TRUE(exited);
  EXPECT_EQ(GrantState(daemon_->state_dir(), r["grant"]["id"]), "released");
}

// A run still unreleased after the stop's last try: the stop says not all
// are dead, and removes its workspace as every run's (the next daemon
// reaps the tree).
TEST_F(DaemonQuarantineTest, AStopRemovesTheWorkspaceOfARunStillUnreleased) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({.tick = std::chrono::hours(1)}));  // no background retry
  HttpClient c = daemon_->Client();
  auto [r, escapee, pinned] = UnreleasedRun(c);
  ASSERT_FALSE(HasFailure());
  const std::filesystem::path workspace = WorkingDirectory(escapee);
  ASSERT_TRUE(std::filesystem::is_directory(workspace)) << workspace;

  auto [all_dead, exited] = StopWith(*daemon_, escapee, pinned);
  EXPECT_FALSE(all_dead);
  EXPECT_FALSE(exited);
  EXPECT_FALSE(std::filesystem::exists(workspace)) << workspace;
  EXPECT_EQ(GrantState(daemon_->state_dir(), r["grant"]["id"]), "active");
}

}  // namespace
}  // namespace cordon::testing
