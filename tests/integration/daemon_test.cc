// The daemon over real loopback HTTP: a real `cordon serve`, real processes,
// real cgroups (under the tests' cgroup root), a real SQLite file.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "closure/sha256.h"
#include "daemon_process.h"
#include "proc/stat.h"
#include "store/store.h"

namespace cordon::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Polls `done` until it holds or `within` passes: for states another
// process changes (a session closed by the daemon's housekeeping).
template <typename F>
bool Eventually(F done, std::chrono::milliseconds within = seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return done();
}

// A process as a test names it: its pid and its start time, so that a
// recycled pid is never taken for it.
struct Process {
  pid_t pid;
  uint64_t start_ticks;
};

// Where a sandbox sees the workspace at `host_path`.
std::string SandboxPath(const std::string& host_path) {
  return SandboxNamespaces() ? "/workspace" : host_path;
}

// What a sandbox's shell prints to name its tree: its pid namespace and its
// own pid, for SandboxTree().
const std::string kPrintTree = "readlink /proc/$$/ns/pid; echo $$";

// A process's cgroups, as /proc/PID/cgroup lists them ("" once it is gone).
std::string CgroupsOf(pid_t pid) { return Slurp("/proc/" + std::to_string(pid) + "/cgroup"); }

// The live processes of the sandbox whose shell printed `printed`
// (kPrintTree): how a test sees a tree from the host. With a pid namespace,
// the processes in it (its own pids mean nothing outside); without one, the
// shell's pid is the host's, and the tree is every process in its cgroups.
// A namespace's number is reused once it is gone (other tests and builds
// make namespaces too), so a test takes this snapshot while the tree lives
// and later asks StillRunning() about these very processes, never the
// number again. Tests name it by the shell's `$$`, not by a background
// job's `$!`: `setsid` forks when it leads a process group, and its first
// process may be gone by then (while that fork is under way there are four
// processes).
std::vector<Process> SandboxTree(const std::string& printed) {
  std::istringstream lines(printed);
  std::string ns, shell;
  std::getline(lines, ns);
  std::getline(lines, shell);
  const bool own_namespace = ns != std::filesystem::read_symlink("/proc/self/ns/pid").string();
  const std::string cgroups =
      own_namespace || shell.empty() ? "" : CgroupsOf(static_cast<pid_t>(std::stoi(shell)));
  if (!own_namespace && (cgroups.empty() || cgroups == CgroupsOf(::getpid()))) return {};
  std::vector<Process> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (own_namespace) {
      std::error_code e2;
      auto link = std::filesystem::read_symlink(entry.path() / "ns" / "pid", e2);
      if (e2 || link != ns) continue;
    } else if (CgroupsOf(pid) != cgroups) {
      continue;
    }
    auto st = proc::ReadStat(pid);
    if (st && !st->exited()) out.push_back({st->pid, st->start_ticks});
  }
  return out;
}

// The pids of those of `seen` that still run (a zombie has ended; a pid
// that now belongs to a process started at another time is not one of them).
std::vector<pid_t> StillRunning(const std::vector<Process>& seen) {
  std::vector<pid_t> running;
  for (const Process& p : seen) {
    auto st = proc::ReadStat(p.pid);
    if (st && !st->exited() && st->start_ticks == p.start_ticks) running.push_back(p.pid);
  }
  return running;
}

::testing::AssertionResult AllEnded(const std::vector<Process>& seen) {
  std::vector<pid_t> running = StillRunning(seen);
  if (running.empty()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure() << "still running:";
  for (pid_t pid : running) {
    failure << " " << pid << " (" << Slurp("/proc/" + std::to_string(pid) + "/stat") << ")";
  }
  return failure;
}

// The live processes named `comm` in the cgroups beneath the tests' root,
// isolated or not: every runtime the test's daemons started.
std::vector<pid_t> ProcessesInTestCgroups(const std::string& comm) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (Slurp(entry.path() / "comm") != comm + "\n") continue;
    if (Slurp(entry.path() / "cgroup").find(CgroupRoot() + "/") == std::string::npos) continue;
    if (!Exited(std::stoi(name))) out.push_back(std::stoi(name));
  }
  return out;
}

std::string Sha256(const std::string& bytes) { return *closure::Sha256Hex(bytes); }

// How many of a session's init, its shell and an escapee the test can see:
// an unprivileged test cannot read the namespace link of the init, which is
// undumpable (ptrace access is refused); without namespaces there is no init.
size_t VisibleTree() { return ::geteuid() == 0 && SandboxNamespaces() ? 3u : 2u; }

// The warm shells and run sandboxes `cordon serve` keeps by default
// (--prespawn-shells, --prespawn-runs): none where sandboxes have no
// namespaces, since a warm sandbox sees its workspace at /workspace whatever
// it is renamed to.
size_t PoolShells() { return SandboxNamespaces() ? 2u : 0u; }
size_t PoolRuns() { return SandboxNamespaces() ? 2u : 0u; }

bool PoolOwner(const std::string& owner) { return owner == "session-pool" || owner == "run-pool"; }

// The active grants, but for those of the warm pools that the daemon `pool_of`
// keeps (owned by `session-pool` or `run-pool` until a session or run takes one).
std::vector<store::GrantRecord> ActiveGrants(const std::string& state_dir, pid_t pool_of) {
  auto store = store::Store::Open(state_dir);
  if (!store) return {};
  auto grants = store->ListGrants(false);
  if (!grants) return {};
  std::erase_if(*grants, [&](const store::GrantRecord& g) {
    return PoolOwner(g.owner) && g.supervisor.pid == pool_of;
  });
  return *grants;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.ready()) << daemon_.Log(); }

  json Create(const std::string& id, json extra = json::object()) {
    extra["id"] = id;
    HttpResponse r = client_.Post("/v1/sessions", extra);
    EXPECT_TRUE(r.status == 201 || r.status == 200) << r.status << " " << r.body;
    return r.Json();
  }
  HttpResponse Exec(const std::string& id, const std::string& command, json extra = json::object(),
                    HttpClient* client = nullptr) {
    extra["command"] = command;
    return (client ? *client : client_).Post("/v1/sessions/" + id + "/exec", extra);
  }
  json ExecOk(const std::string& id, const std::string& command, json extra = json::object()) {
    HttpResponse r = Exec(id, command, std::move(extra));
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json();
  }
  std::string State(const std::string& id) {
    json j = client_.Get("/v1/sessions/" + id).Json();
    return j.is_object() ? j.value("state", "") : "";
  }

  DaemonProcess daemon_;
  HttpClient client_ = daemon_.Client();
  TempDir work_;
};

// --- auth ---

TEST_F(DaemonTest, HealthNeedsNoTokenEverythingElseDoes) {
  HttpClient anonymous(daemon_.url(), "");
  EXPECT_EQ(anonymous.Get("/v1/health").status, 200);
  for (const char* path : {"/v1/probe", "/metrics", "/v1/sessions", "/v1/nope"}) {
    HttpResponse r = anonymous.Get(path);
    EXPECT_EQ(r.status, 401) << path;
    EXPECT_EQ(r.Json()["error"]["code"], "unauthorized");
    EXPECT_EQ(r.body.find("sessions"), std::string::npos) << "401 reveals nothing: " << r.body;
  }
  HttpClient wrong(daemon_.url(), daemon_.token() + "x");
  EXPECT_EQ(wrong.Get("/v1/probe").status, 401);
  EXPECT_EQ(wrong.Post("/v1/runs", {{"argv", {"/bin/true"}}}).status, 401);
  // Both spellings of the header.
  HttpClient plain(daemon_.url(), "");
  EXPECT_EQ(
      plain.Request("GET", "/v1/probe", "", {{"Authorization", "token " + daemon_.token()}}).status,
      200);
  EXPECT_EQ(plain.Request("GET", "/v1/probe", "", {{"Authorization", "Bearer " + daemon_.token()}})
                .status,
            200);
  // The generated token file is private.
  struct stat st {};
  ASSERT_EQ(::stat((daemon_.state_dir() + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// --- every validation error: 400 naming the field, nothing changed ---

TEST_F(DaemonTest, EveryValidationErrorNamesTheField) {
  struct Case {
    std::string path;
    std::string body;
    std::string field;
  };
  Create("valid");
  const std::vector<Case> cases = {
      {"/v1/runs", "not json", ""},
      {"/v1/runs", "[1]", ""},
      {"/v1/runs", R"({})", "argv"},
      {"/v1/runs", R"({"argv": []})", "argv"},
      {"/v1/runs", R"({"argv": "ls"})", "argv"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "shell": "true"})", "argv"},
      {"/v1/runs", R"({"shell": ""})", "shell"},
      {"/v1/runs", R"({"shell": 5})", "shell"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "env": {"A=B": "1"}})", "env"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "env": {"A": 1}})", "env"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "env": ["A=1"]})", "env"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "workspace": "relative"})", "workspace"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "workspace": "/no/such/dir"})", "workspace"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "stdin": "a", "stdin_b64": "YQ=="})", "stdin_b64"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "stdin_b64": "!!!"})", "stdin_b64"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"timeout_ms": 0}})", "limits.timeout_ms"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"timeout_ms": "1"}})",
       "limits.timeout_ms"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"grace_ms": -1}})", "limits.grace_ms"},
      // INT64_MAX milliseconds overflowed the deadline, which passed at once.
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"timeout_ms": 9223372036854775807}})",
       "limits.timeout_ms"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"output_limit_bytes": 0}})",
       "limits.output_limit_bytes"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"memory_bytes": -5}})",
       "limits.memory_bytes"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"pids": 0}})", "limits.pids"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"disk_inodes": 4294967297}})",
       "limits.disk_inodes"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"cpu_seconds": 0}})",
       "limits.cpu_seconds"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"file_size_bytes": 0}})",
       "limits.file_size_bytes"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"open_files": 0}})", "limits.open_files"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": {"wall": 1}})", "limits.wall"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "limits": 5})", "limits"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "require": ["teleport"]})", "require"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "isolation": "full"})", "isolation"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "isolation": {"level": "x"}})", "isolation.level"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "isolation": {"network": "lan"}})",
       "isolation.network"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "isolation": {"nets": "none"}})", "isolation.nets"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "permissive": "yes"})", "permissive"},
      {"/v1/runs", R"({"argv": ["/bin/true"], "timeout": 5})", "timeout"},
      {"/v1/sessions", R"({"id": "bad id!"})", "id"},
      {"/v1/sessions", R"({"id": ")" + std::string(65, 'a') + R"("})", "id"},
      {"/v1/sessions", R"({"kind": "ruby"})", "kind"},
      {"/v1/sessions", R"({"ttl_s": 0})", "ttl_s"},
      {"/v1/sessions", R"({"env": {"": "x"}})", "env"},
      {"/v1/sessions", R"({"limits": {"pids": -1}})", "limits.pids"},
      {"/v1/sessions", R"({"isolation": "gvisor"})", "isolation"},
      {"/v1/sessions", R"({"fresh_workspace": 1})", "fresh_workspace"},
      {"/v1/sessions/valid/exec", R"({})", "command"},
      {"/v1/sessions/valid/exec", R"({"command": ""})", "command"},
      {"/v1/sessions/valid/exec", R"({"command": "true", "timeout_ms": -1})", "timeout_ms"},
      {"/v1/sessions/valid/exec", R"({"command": "true", "timeout_ms": 9223372036854775807})",
       "timeout_ms"},
      {"/v1/sessions/valid/exec", R"({"command": "true", "stdin": 3})", "stdin"},
      {"/v1/sessions/valid/exec", R"({"command": "true", "cwd": "/"})", "cwd"},
  };
  for (const Case& c : cases) {
    HttpResponse r =
        client_.Request("POST", c.path, c.body, {{"Content-Type", "application/json"}});
    EXPECT_EQ(r.status, 400) << c.path << " " << c.body << " -> " << r.body;
    json e = r.Json()["error"];
    EXPECT_TRUE(e["message"].is_string()) << r.body;
    if (!c.field.empty()) {
      EXPECT_EQ(e.value("field", ""), c.field) << c.body << " -> " << r.body;
    }
  }
  HttpResponse isolation = client_.Post("/v1/runs", {{"argv", {"/bin/true"}}, {"isolation", "x"}});
  EXPECT_NE(isolation.body.find("is not a level"), std::string::npos) << isolation.body;
  for (const char* level : {"none", "standard", "strict"}) {
    EXPECT_EQ(client_.Post("/v1/runs", {{"argv", {"/bin/true"}}, {"isolation", level}}).status, 200)
        << level;
  }
  // Nothing was admitted or created by the refused requests.
  json sessions = client_.Get("/v1/sessions").Json()["sessions"];
  EXPECT_EQ(sessions.size(), 1u) << sessions;
  EXPECT_TRUE(ActiveGrants(daemon_.state_dir(), daemon_.pid()).size() ==
              1u);  // the valid session's shell
}

// A query parameter a route does not take is refused, naming it, rather
// than ignored: `?path=` for `?dir=` listed the workspace's top, and
// `?keep_workspace=True` deleted the workspace it meant to keep.
TEST_F(DaemonTest, AnUnknownOrBadQueryParameterIsRefusedAndChangesNothing) {
  json session = Create("q");
  ASSERT_EQ(client_.Request("PUT", "/v1/sessions/q/files/sub/kept.txt", "kept").status, 201);
  struct Case {
    std::string method;
    std::string target;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"GET", "/v1/sessions/q/files?path=sub", "path"},
      {"PUT", "/v1/sessions/q/files/new.txt?ofset=0", "ofset"},
      {"GET", "/v1/sessions/q/files/sub/kept.txt?offset=1", "offset"},
      {"GET", "/v1/health?verbose=1", "verbose"},
      {"DELETE", "/v1/sessions/q?keep_workspace=True", "keep_workspace"},
      {"DELETE", "/v1/sessions/q?keep=true", "keep"},
  };
  for (const Case& c : cases) {
    HttpResponse r = client_.Request(c.method, c.target, c.method == "PUT" ? "x" : "");
    EXPECT_EQ(r.status, 400) << c.method << " " << c.target << " -> " << r.body;
    EXPECT_EQ(r.Json()["error"].value("field", ""), c.field) << r.body;
  }
  EXPECT_NE(client_.Request("DELETE", "/v1/sessions/q?keep=1").body.find("known: keep_workspace"),
            std::string::npos);
  // Nothing changed: the session is there with its file, and nothing was
  // written.
  EXPECT_EQ(client_.Get("/v1/sessions/q").Json()["state"], "ready");
  EXPECT_EQ(client_.Get("/v1/sessions/q/files/sub/kept.txt").body, "kept");
  EXPECT_EQ(client_.Get("/v1/sessions/q/files/new.txt").status, 404);
  // The parameters a route takes still work, and a flag given alone is
  // true.
  EXPECT_EQ(client_.Get("/v1/sessions/q/files?dir=sub").Json()["entries"].size(), 1u);
  HttpResponse closed = client_.Request("DELETE", "/v1/sessions/q?keep_workspace");
  EXPECT_EQ(closed.status, 200) << closed.body;
  EXPECT_EQ(::access((session["workspace"].get<std::string>() + "/sub/kept.txt").c_str(), F_OK), 0);
}

TEST_F(DaemonTest, StatusesForUnknownPathsMethodsAndSizes) {
  EXPECT_EQ(client_.Get("/v1/nothing").status, 404);
  EXPECT_EQ(client_.Get("/v1/sessions/nobody").status, 404);
  EXPECT_EQ(client_.Post("/v1/sessions/nobody/exec", {{"command", "true"}}).status, 404);
  HttpResponse wrong = client_.Request("DELETE", "/v1/runs");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("Allow"), "POST");
  HttpResponse big = client_.Request("POST", "/v1/runs", std::string(2 << 20, ' '));
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_EQ(big.Json()["error"]["code"], "too_large");
  Create("big");
  HttpResponse command = Exec("big", std::string(300 << 10, 'a'));
  EXPECT_EQ(command.status, 413) << command.body;
  HttpClient fresh = daemon_.Client();
  HttpResponse header =
      fresh.Request("GET", "/v1/health", "", {{"X-Big", std::string(32 << 10, 'a')}});
  EXPECT_EQ(header.status, 431);
}

// --- runs ---

TEST_F(DaemonTest, ARunReturnsTheRunResult) {
  HttpResponse r = client_.Post("/v1/runs", {{"argv", {"/usr/bin/env"}}, {"env", {{"A", "1"}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.Json();
  EXPECT_EQ(j["outcome"], "exited");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["stdout"], "A=1\n");
  EXPECT_EQ(j["release"]["dead"], true);
  EXPECT_TRUE(j["grant"]["id"].is_string());

  json shell = client_
                   .Post("/v1/runs",
                         {{"shell", "pwd; ls -A | wc -l; cat; exit 3"}, {"stdin_b64", "aGVsbG8="}})
                   .Json();
  EXPECT_EQ(shell["exit_code"], 3);
  // No workspace given: a fresh, empty one, at /workspace in the sandbox that
  // a run gets by default (without namespaces, at its host path).
  const std::string out = shell["stdout"];
  if (SandboxNamespaces()) {
    EXPECT_EQ(out, "/workspace\n0\nhello") << shell;
  } else {
    EXPECT_TRUE(out.starts_with(daemon_.state_dir() + "/scratch/") && out.ends_with("\n0\nhello"))
        << shell;
  }
  // (Landlock came in 5.13: before, the mount namespace alone.)
  std::string filesystem = SandboxNamespaces() ? "mount_namespace" : "";
  if (TestProbe().isolation.landlock_abi > 0)
    filesystem += filesystem.empty() ? "landlock" : "+landlock";
  EXPECT_EQ(shell["grant"]["mechanisms"]["filesystem"], filesystem) << shell;
  json bare = client_.Post("/v1/runs", {{"shell", "pwd; hostname"}, {"isolation", "none"}}).Json();
  EXPECT_NE(bare["stdout"].get<std::string>().find("/scratch/"), std::string::npos) << bare;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(client_.Post("/v1/runs", {{"argv", {"/bin/hostname"}}}).Json()["stdout"],
            (SandboxNamespaces() ? "cordon" : std::string(host)) + "\n");

  json timed = client_
                   .Post("/v1/runs", {{"argv", {"/bin/sleep", "30"}},
                                      {"limits", {{"timeout_ms", 200}, {"grace_ms", 100}}}})
                   .Json();
  EXPECT_EQ(timed["outcome"], "timed_out");
  json missing = client_.Post("/v1/runs", {{"argv", {"/no/such/program"}}}).Json();
  EXPECT_EQ(missing["outcome"], "setup_failed");
  EXPECT_EQ(missing["setup_error"]["errno"], "ENOENT");
  json capped = client_
                    .Post("/v1/runs", {{"shell", "head -c 1000 /dev/zero | tr '\\0' a"},
                                       {"limits", {{"output_limit_bytes", 16}}}})
                    .Json();
  EXPECT_EQ(capped["stdout_truncated"], true);
  EXPECT_EQ(capped["stdout_bytes"], 1000);
  EXPECT_EQ(ActiveGrants(daemon_.state_dir(), daemon_.pid()).size(), 0u);
}

TEST_F(DaemonTest, StreamingSendsOutputAsItArrivesThenTheResult) {
  RawConnection c(daemon_.url());
  std::string body =
      json({{"shell", "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three"}}).dump();
  c.Send("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + daemon_.token() +
         "\r\nAccept: application/x-ndjson\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body);
  std::string first = c.ReadUntil("one", seconds(20));
  // The first event arrives while the run still goes on.
  EXPECT_EQ(first.find("\"type\":\"result\""), std::string::npos);
  EXPECT_NE(first.find("Transfer-Encoding: chunked"), std::string::npos) << first;
  EXPECT_NE(first.find("application/x-ndjson"), std::string::npos);
  std::string all = c.ReadUntil("0\r\n\r\n", seconds(20));
  std::vector<json> events;
  for (size_t at = all.find("{\""); at != std::string::npos; at = all.find("{\"", at + 1)) {
    size_t end = all.find('\n', at);
    json e = json::parse(all.substr(at, end - at), nullptr, false);
    if (!e.is_discarded()) {
      events.push_back(e);
      at = end;
    }
  }
  ASSERT_EQ(events.size(), 4u) << all;
  EXPECT_EQ(events[0], json({{"type", "stdout"}, {"data", "one\n"}}));
  EXPECT_EQ(events[1], json({{"type", "stderr"}, {"data", "two\n"}}));
  EXPECT_EQ(events[2], json({{"type", "stdout"}, {"data", "three\n"}}));
  EXPECT_EQ(events[3]["type"], "result");
  EXPECT_EQ(events[3]["outcome"], "exited");
  EXPECT_EQ(events[3]["stdout"], "one\nthree\n");
}

TEST_F(DaemonTest, AClientThatDisconnectsCancelsItsRun) {
  std::string pidfile = work_ / "gc.pid";
  for (bool streaming : {false, true}) {
    ::unlink(pidfile.c_str());
    RawConnection c(daemon_.url());
    std::string body =
        // Without isolation: the test watches the grandchild by its host pid.
        json({{"shell", "setsid sleep 60 & echo $! > " + pidfile + "; sleep 60"},
              {"isolation", "none"}})
            .dump();
    c.Send("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + daemon_.token() +
           (streaming ? "\r\nAccept: application/x-ndjson" : "") +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    auto grandchild = ReadPidFile(pidfile);
    ASSERT_TRUE(grandchild);
    c.Close();
    // The run is cancelled, torn down and recorded.
    ASSERT_TRUE(
        Eventually([&] { return ActiveGrants(daemon_.state_dir(), daemon_.pid()).empty(); }));
    EXPECT_TRUE(Exited(*grandchild));
    auto store = store::Store::Open(daemon_.state_dir());
    ASSERT_TRUE(store);
    auto all = store->ListGrants(true);
    ASSERT_TRUE(all);
    // The run's, the newest but the pools' (refilled meanwhile, on workers).
    std::erase_if(*all, [](const store::GrantRecord& g) { return PoolOwner(g.owner); });
    ASSERT_FALSE(all->empty());
    EXPECT_EQ(all->front().outcome, "cancelled");
    EXPECT_EQ(all->front().release["dead"], true);
  }
}

// --- sessions ---

TEST_F(DaemonTest, SessionStatePersistsAndTheEnvironmentIsTheAllowlist) {
  json s = Create("persist", {{"env", {{"MINE", "declared"}}}});
  EXPECT_EQ(s["state"], "ready");
  EXPECT_EQ(s["generation"], 1);
  std::string ws = daemon_.Workspace("persist");
  struct stat st {};
  ASSERT_EQ(::stat(ws.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((daemon_.state_dir() + "/workspaces").c_str(), &st), 0);
  // Passable, not listable, where sandboxes reach their workspaces by path
  // as uids of their own (no user namespace).
  EXPECT_EQ(st.st_mode & 0777, TestProbe().SandboxesRunAsOwnUids() ? 0711u : 0700u);

  ExecOk("persist", "mkdir sub && cd sub; export V=42; f() { echo fn-$1; }");
  json j = ExecOk("persist", "pwd; echo $V; f x");
  EXPECT_EQ(j["stdout"], SandboxPath(ws) + "/sub\n42\nfn-x\n");
  EXPECT_EQ(j["exit_code"], 0);
  json env = ExecOk("persist", "env | grep -v -e ^PWD= -e ^OLDPWD= -e ^SHLVL= -e ^_= | sort");
  EXPECT_EQ(
      env["stdout"],
      "HOME=" + SandboxPath(ws) +
          "\nLANG=C.UTF-8\nMINE=declared\n"
          "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nTERM=dumb\nV=42\n");
  json status = ExecOk("persist", "echo out; echo err >&2; (exit 5)");
  EXPECT_EQ(status["exit_code"], 5);
  EXPECT_EQ(status["stdout"], "out\n");
  EXPECT_EQ(status["stderr"], "err\n");
  json no_stdin = ExecOk("persist", "cat; echo done");
  EXPECT_EQ(no_stdin["stdout"], "done\n");
  json with_stdin = ExecOk("persist", "cat", {{"stdin", "line1\nline2"}});
  EXPECT_EQ(with_stdin["stdout"], "line1\nline2");
  json quoting = ExecOk("persist", "printf '%s|' \"a'b\" 'c\"d' $'\\t' '$(x)' \\\\ ; echo 'ü €'");
  EXPECT_EQ(quoting["stdout"], "a'b|c\"d|\t|$(x)|\\|ü €\n");
  json capped = ExecOk("persist", "head -c 100000 /dev/zero | tr '\\0' x");
  EXPECT_EQ(capped["stdout_bytes"], 100000);
  EXPECT_FALSE(capped["stdout_truncated"]);
  // Output with the marker's shape, and the marker of an earlier execution.
  json fake = ExecOk("persist", "echo cordon-end-00000000000000000000000000000000 0; echo after");
  EXPECT_EQ(fake["stdout"], "cordon-end-00000000000000000000000000000000 0\nafter\n");
  EXPECT_EQ(ExecOk("persist", "echo still")["stdout"], "still\n");
}

TEST_F(DaemonTest, ExecutionsOnOneSessionAreSerialised) {
  Create("serial");
  std::string log = daemon_.Workspace("serial") + "/order.log";
  std::vector<std::thread> threads;
  std::vector<int> statuses(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      HttpClient c = daemon_.Client();
      std::string n = std::to_string(i);
      statuses[i] =
          Exec("serial",
               "echo start-" + n + " >> order.log; sleep 0.1; echo end-" + n + " >> order.log",
               json::object(), &c)
              .status;
    });
  }
  for (auto& t : threads) t.join();
  for (int s : statuses) EXPECT_EQ(s, 200);
  std::istringstream lines(Slurp(log));
  std::string a, b;
  int pairs = 0;
  while (lines >> a >> b) {
    EXPECT_EQ(a.substr(0, 6), "start-");
    EXPECT_EQ(b, "end-" + a.substr(6)) << Slurp(log);
    ++pairs;
  }
  EXPECT_EQ(pairs, 4);
}

TEST_F(DaemonTest, InterruptStopsTheRunningCommandAndKeepsTheShell) {
  Create("intr");
  ExecOk("intr", "X=kept");
  std::string started = daemon_.Workspace("intr") + "/started";
  HttpResponse result;
  std::thread t([&] {
    HttpClient c = daemon_.Client();
    result =
        Exec("intr", "echo $$ > started; sleep 30; echo not-reached", {{"timeout_ms", 60000}}, &c);
  });
  EXPECT_TRUE(ReadPidFile(started));  // (not ASSERT: the thread must be joined)
  EXPECT_EQ(State("intr"), "busy");
  HttpResponse r = client_.Post("/v1/sessions/intr/interrupt", json::object());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["interrupted"], true);
  t.join();
  json j = result.Json();
  EXPECT_EQ(j["exit_code"], 130) << j;
  EXPECT_EQ(j["timed_out"], false);
  EXPECT_EQ(j["stdout"], "");
  EXPECT_EQ(ExecOk("intr", "echo $X")["stdout"], "kept\n");
  // A builtin loop in the shell itself is interrupted too.
  std::thread loop([&] {
    HttpClient c = daemon_.Client();
    result = Exec("intr", "touch started.2; while :; do :; done", {{"timeout_ms", 60000}}, &c);
  });
  EXPECT_TRUE(Eventually([&] { return ::access((started + ".2").c_str(), F_OK) == 0; }));
  client_.Post("/v1/sessions/intr/interrupt", json::object());
  loop.join();
  EXPECT_EQ(result.Json()["exit_code"], 130);
  EXPECT_EQ(client_.Post("/v1/sessions/intr/interrupt", json::object()).Json()["interrupted"],
            false);
}

TEST_F(DaemonTest, TimeoutLadderKeepsAShellThatComesBack) {
  Create("ladder-ok", {{"limits", {{"grace_ms", 5000}}}});
  ExecOk("ladder-ok", "Y=survives");
  json j = ExecOk("ladder-ok", "sleep 30", {{"timeout_ms", 200}});
  EXPECT_EQ(j["timed_out"], true);
  EXPECT_EQ(j["invalidated"], false);
  EXPECT_EQ(j["exit_code"], 130);
  EXPECT_LT(j["duration_ms"].get<int64_t>(), 5000);
  EXPECT_EQ(State("ladder-ok"), "ready");
  EXPECT_EQ(ExecOk("ladder-ok", "echo $Y")["stdout"], "survives\n");
}

TEST_F(DaemonTest, TimeoutLadderInvalidatesAShellThatDoesNotAndANewGenerationStartsClean) {
  json first = Create("ladder", {{"limits", {{"grace_ms", 300}}}});
  std::string ns =
      ExecOk("ladder", "echo old > old.txt; setsid sleep 300 & " + kPrintTree)["stdout"];
  std::vector<Process> tree = SandboxTree(ns);
  ASSERT_GE(tree.size(), VisibleTree()) << ns << " (init, the shell, the escapee)";
  // The shell ignores SIGINT from now on: it cannot come back.
  json j = ExecOk("ladder", "trap '' INT; sleep 30", {{"timeout_ms", 200}});
  EXPECT_EQ(j["timed_out"], true);
  EXPECT_EQ(j["invalidated"], true);
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_TRUE(AllEnded(tree)) << "the whole tree is torn down";
  EXPECT_EQ(State("ladder"), "invalidated");
  HttpResponse refused = Exec("ladder", "echo hi");
  EXPECT_EQ(refused.status, 409);
  EXPECT_NE(refused.Json()["error"]["message"].get<std::string>().find("invalidated"),
            std::string::npos);
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/ladder/files/x", "y").status, 409);

  HttpResponse again = client_.Post("/v1/sessions", {{"id", "ladder"}});
  EXPECT_EQ(again.status, 201);
  json second = again.Json();
  EXPECT_EQ(second["generation"], 2);
  EXPECT_NE(second["grant_id"], first["grant_id"]);
  EXPECT_EQ(ExecOk("ladder", "ls -A | wc -l")["stdout"], "0\n") << "a fresh, empty workspace";
}

TEST_F(DaemonTest, ACommandThatExitsTheShellGetsAFreshOne) {
  Create("exit");
  ExecOk(
      "exit",
      "Z=gone; cd /tmp; echo keep > kept.txt 2>/dev/null; cd - >/dev/null; echo keep > kept.txt");
  json j = ExecOk("exit", "echo bye; exit 7");
  EXPECT_EQ(j["exit_code"], 7);
  EXPECT_EQ(j["stdout"], "bye\n");
  EXPECT_EQ(j["shell_restarted"], true);
  json after = ExecOk("exit", "echo Z=$Z; pwd; cat kept.txt");
  EXPECT_EQ(after["stdout"], "Z=\n" + SandboxPath(daemon_.Workspace("exit")) + "\nkeep\n");
  EXPECT_EQ(after["shell_restarted"], false);
}

// Eight creates of one session at once: one starts it (201), the others
// get it (200), all the same grant.
void ExpectOneRuntimeForConcurrentCreates(DaemonProcess& daemon, const json& body) {
  std::vector<std::thread> threads;
  std::vector<int> statuses(8);
  std::vector<std::string> grants(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      HttpClient c = daemon.Client();
      HttpResponse r = c.Post("/v1/sessions", body);
      statuses[i] = r.status;
      grants[i] = r.Json().value("grant_id", "");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 201), 1);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), 7);
  for (const auto& g : grants) EXPECT_EQ(g, grants[0]);
}

TEST_F(DaemonTest, ConcurrentCreatesOfOneIdStartOneRuntime) {
  ExpectOneRuntimeForConcurrentCreates(daemon_, {{"id", "once"}});
  // Once the warm pool has refilled (nothing else starts then): the
  // session's shell and the pool's, and every runtime started is a grant.
  ASSERT_TRUE(Eventually([&] {
    json health = client_.Get("/v1/health").Json();
    return health.value("shells_warm", 0) == int(PoolShells()) &&
           health.value("runs_warm", 0) == int(PoolRuns());
  }));
  // (Counted by their cgroups, where there are any for this user.)
  if (NoTreeWithoutIsolation().empty()) {
    EXPECT_EQ(ProcessesInTestCgroups("bash").size(), 1u + PoolShells());
  }
  auto store = store::Store::Open(daemon_.state_dir());
  ASSERT_TRUE(store);
  auto recorded = store->ListGrants(true).value();
  std::erase_if(recorded, [](const auto& g) { return g.owner == "run-pool"; });
  EXPECT_EQ(recorded.size(), 1u + PoolShells());
  EXPECT_EQ(std::count_if(recorded.begin(), recorded.end(),
                          [](const auto& g) { return g.owner == "session:once"; }),
            1);
}

// A cold create's workspace is made on a worker; the creates of the same id
// that come meanwhile wait for it and get the same runtime.
TEST_F(DaemonTest, ConcurrentColdCreatesOfOneIdStartOneRuntime) {
  // An environment of its own: no warm shell matches it.
  ExpectOneRuntimeForConcurrentCreates(daemon_, {{"id", "cold-once"}, {"env", {{"MINE", "1"}}}});
  EXPECT_EQ(ExecOk("cold-once", "echo $MINE")["stdout"], "1\n");
  auto store = store::Store::Open(daemon_.state_dir());
  ASSERT_TRUE(store);
  auto recorded = store->ListGrants(true).value();
  EXPECT_EQ(std::count_if(recorded.begin(), recorded.end(),
                          [](const auto& g) { return g.owner == "session:cold-once"; }),
            1);
}

TEST_F(DaemonTest, TwentySessionsExecuteInParallel) {
  constexpr int kSessions = 20;
  // Without isolation: the sessions meet in a directory of the host.
  for (int i = 0; i < kSessions; ++i) Create("par-" + std::to_string(i), {{"isolation", "none"}});
  ::chmod(work_.path().c_str(), 0777);
  // Each execution waits until all of them have started: it can finish only
  // if all twenty run at the same time.
  std::vector<std::thread> threads;
  std::vector<json> results(kSessions);
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      HttpClient c = daemon_.Client();
      std::string cmd = "touch " + work_.path() + "/ready-" + std::to_string(i) +
                        "; while [ $(ls " + work_.path() + " | grep -c ready-) -lt " +
                        std::to_string(kSessions) + " ]; do sleep 0.02; done; echo " +
                        std::to_string(i);
      results[i] = Exec("par-" + std::to_string(i), cmd, {{"timeout_ms", 60000}}, &c).Json();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_EQ(results[i]["stdout"], std::to_string(i) + "\n") << results[i];
    EXPECT_EQ(results[i]["timed_out"], false);
  }
}

// --- files ---

TEST_F(DaemonTest, SevenMegabytesInThreeChunksComeBackByteForByte) {
  Create("files");
  std::string data(7 << 20, '\0');
  std::mt19937 rng(7);
  for (auto& c : data) c = static_cast<char>(rng());
  const size_t a = 2500000, b = 2500000;
  std::string digest = Sha256(data);
  HttpResponse r1 =
      client_.Request("PUT", "/v1/sessions/files/files/big/blob.bin", data.substr(0, a));
  EXPECT_EQ(r1.status, 201) << r1.body;
  HttpResponse r2 = client_.Request("PUT", "/v1/sessions/files/files/big/blob.bin?offset=2500000",
                                    data.substr(a, b));
  EXPECT_EQ(r2.status, 200) << r2.body;
  HttpResponse r3 = client_.Request("PUT", "/v1/sessions/files/files/big/blob.bin?offset=5000000",
                                    data.substr(a + b), {{"X-Content-SHA256", digest}});
  ASSERT_EQ(r3.status, 200) << r3.body;
  EXPECT_EQ(r3.Json()["sha256"], digest);
  EXPECT_EQ(r3.Json()["size"], data.size());
  HttpResponse got = client_.Get("/v1/sessions/files/files/big/blob.bin");
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.Header("X-Content-SHA256"), digest);
  EXPECT_EQ(got.Header("Content-Length"), std::to_string(data.size()));
  EXPECT_TRUE(got.body == data);
  HttpResponse head = client_.Request("HEAD", "/v1/sessions/files/files/big/blob.bin");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.Header("Content-Length"), std::to_string(data.size()));
  EXPECT_EQ(head.Header("X-Content-SHA256"), digest);
  // The session's own processes see it.
  EXPECT_EQ(ExecOk("files", "sha256sum big/blob.bin | cut -c1-64")["stdout"], digest + "\n");
  json listing = client_.Get("/v1/sessions/files/files?dir=big").Json();
  ASSERT_EQ(listing["entries"].size(), 1u);
  EXPECT_EQ(listing["entries"][0]["name"], "blob.bin");
  EXPECT_EQ(listing["entries"][0]["type"], "file");
  EXPECT_EQ(listing["entries"][0]["size"], data.size());
  // Out of order: refused, nothing changed.
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/files/files/big/blob.bin?offset=5", "x").status,
            409);
  EXPECT_EQ(client_.Request("DELETE", "/v1/sessions/files/files/big/blob.bin").status, 200);
  EXPECT_EQ(client_.Get("/v1/sessions/files/files/big/blob.bin").status, 404);
}

TEST_F(DaemonTest, AnEmptyFileWorks) {
  Create("empty");
  HttpResponse put = client_.Request("PUT", "/v1/sessions/empty/files/e.txt", "",
                                     {{"X-Content-SHA256", Sha256("")}});
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(put.Json()["size"], 0);
  HttpResponse got = client_.Get("/v1/sessions/empty/files/e.txt");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "");
  EXPECT_EQ(got.Header("Content-Length"), "0");
  EXPECT_EQ(got.Header("X-Content-SHA256"), Sha256(""));
}

TEST_F(DaemonTest, ADigestMismatchLeavesNothing) {
  Create("digest");
  std::string wrong = Sha256("something else");
  HttpResponse whole = client_.Request("PUT", "/v1/sessions/digest/files/d/whole.txt", "content",
                                       {{"X-Content-SHA256", wrong}});
  EXPECT_EQ(whole.status, 422) << whole.body;
  EXPECT_EQ(whole.Json()["error"]["field"], "X-Content-SHA256");
  EXPECT_EQ(client_.Get("/v1/sessions/digest/files/d/whole.txt").status, 404);
  // A replacement that does not verify leaves the old file as it was.
  client_.Request("PUT", "/v1/sessions/digest/files/keep.txt", "old");
  EXPECT_EQ(client_
                .Request("PUT", "/v1/sessions/digest/files/keep.txt", "new",
                         {{"X-Content-SHA256", wrong}})
                .status,
            422);
  EXPECT_EQ(client_.Get("/v1/sessions/digest/files/keep.txt").body, "old");
  // A chunked upload whose final digest does not match is removed whole.
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/digest/files/chunked.bin", "part1").status, 201);
  EXPECT_EQ(client_
                .Request("PUT", "/v1/sessions/digest/files/chunked.bin?offset=5", "part2",
                         {{"X-Content-SHA256", wrong}})
                .status,
            422);
  EXPECT_EQ(client_.Get("/v1/sessions/digest/files/chunked.bin").status, 404);
  json listing = client_.Get("/v1/sessions/digest/files").Json();
  for (const auto& e : listing["entries"]) {
    EXPECT_EQ(e["name"].get<std::string>().find(".cordon-upload"), std::string::npos) << listing;
  }
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/digest/files/x", "y", {{"X-Content-SHA256", "zz"}})
                .status,
            400);
}

TEST_F(DaemonTest, FilesAreSharedBothWaysWithAnIsolatedSession) {
  Create("owned");  // standard isolation: the sandbox's root is an id of its own outside
  ASSERT_EQ(client_.Request("PUT", "/v1/sessions/owned/files/in/up.txt", "uploaded\n").status, 201);
  json j = ExecOk("owned",
                  "echo changed >> in/up.txt && stat -c %u in/up.txt && id -u && "
                  "echo made > in/made.txt");
  // The uploaded file is the sandbox's own user's to change: its root, or
  // without a user namespace the uid it runs as.
  std::istringstream ids(j["stdout"].get<std::string>());
  std::string owner, self;
  ids >> owner >> self;
  EXPECT_EQ(owner, self) << j;
  if (SandboxNamespaces()) {
    EXPECT_EQ(self, "0") << j;
  }
  EXPECT_EQ(client_.Get("/v1/sessions/owned/files/in/up.txt").body, "uploaded\nchanged\n");
  EXPECT_EQ(client_.Get("/v1/sessions/owned/files/in/made.txt").body, "made\n");
  // What the sandbox made belongs to the workspace's owner outside, not to
  // the sandbox's own outside id.
  struct stat ws {
  }, made{};
  ASSERT_EQ(::stat(daemon_.Workspace("owned").c_str(), &ws), 0);
  ASSERT_EQ(::stat((daemon_.Workspace("owned") + "/in/made.txt").c_str(), &made), 0);
  EXPECT_EQ(made.st_uid, ws.st_uid);
}

TEST_F(DaemonTest, TraversalAndSymlinkEscapesAreRefused) {
  Create("escape");
  std::string outside = work_ / "outside.txt";
  ExecOk("escape", "ln -s / root; ln -s ../../../.. up; ln -s " + work_.path() +
                       " out; ln -s /etc/passwd pw; mkdir in; ln -s in inner; echo ok > in/f");
  for (std::string path : {"..%2F..%2Fetc%2Fpasswd", "a/..%2F..%2Fx", "%2Fetc%2Fpasswd", "./x"}) {
    HttpResponse r = client_.Get("/v1/sessions/escape/files/" + path);
    EXPECT_EQ(r.status, 400) << path << " " << r.body;
  }
  for (std::string path : {"root/etc/passwd", "up/etc/passwd", "pw", "out/outside.txt"}) {
    HttpResponse r = client_.Get("/v1/sessions/escape/files/" + path);
    EXPECT_EQ(r.status, 403) << path << " " << r.body;
    EXPECT_EQ(r.Json()["error"]["code"], "forbidden");
  }
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/escape/files/out/outside.txt", "x").status, 403);
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/escape/files/out/new/deeper.txt", "x").status,
            403);
  EXPECT_EQ(client_.Request("PUT", "/v1/sessions/escape/files/..%2Foutside.txt", "x").status, 400);
  EXPECT_EQ(client_.Get("/v1/sessions/escape/files?dir=root").status, 403);
  EXPECT_EQ(client_.Get("/v1/sessions/escape/files?dir=..").status, 400);
  EXPECT_EQ(client_.Request("DELETE", "/v1/sessions/escape/files/out/x").status, 403);
  EXPECT_NE(::access(outside.c_str(), F_OK), 0) << "nothing was written outside";
  EXPECT_NE(::access((work_ / "new").c_str(), F_OK), 0);
  // A link that stays inside is fine.
  HttpResponse inner = client_.Get("/v1/sessions/escape/files/inner/f");
  EXPECT_EQ(inner.status, 200);
  EXPECT_EQ(inner.body, "ok\n");
}

// --- recovery, culling, shutdown, limits ---

TEST(DaemonRecoveryTest, AfterSigkillARestartReapsEverythingAndSessionsAreLost) {
  TempDir state;
  TempDir work;
  std::string state_dir = state / "state";
  std::string ns;
  std::vector<Process> tree;
  pid_t run_leader = 0;
  {
    DaemonProcess first({}, state_dir);
    ASSERT_TRUE(first.ready()) << first.Log();
    HttpClient c = first.Client();
    ASSERT_EQ(c.Post("/v1/sessions", {{"id", "keep"}}).status, 201);
    ASSERT_EQ(c.Post("/v1/sessions", {{"id", "fresh"}}).status, 201);
    c.Post("/v1/sessions/fresh/exec", {{"command", "echo old > old.txt"}});
    ns = c.Post("/v1/sessions/keep/exec",
                {{"command", "echo data > file.txt; setsid sleep 300 & " + kPrintTree}})
             .Json()["stdout"];
    tree = SandboxTree(ns);
    ASSERT_GE(tree.size(), VisibleTree()) << ns;
    RawConnection run(first.url());
    std::string body = json({{"shell", "echo $$ > " + (work / "run.pid") + "; exec sleep 300"},
                             {"isolation", "none"}})
                           .dump();
    run.Send("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + first.token() +
             "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    auto pid = ReadPidFile(work / "run.pid");
    ASSERT_TRUE(pid);
    run_leader = *pid;
    first.Signal(SIGKILL);
    EXPECT_EQ(first.Wait(), 128 + SIGKILL);
    // (The isolated shell ends on its own once its pipes close, and with it
    // the sandbox's init and namespace; the run, without isolation, stays.)
    EXPECT_FALSE(Exited(run_leader));
    EXPECT_EQ(ActiveGrants(state_dir, first.pid()).size(), 3u);
  }
  DaemonProcess second({}, state_dir);
  ASSERT_TRUE(second.ready()) << second.Log();
  // ...and dead before the restarted daemon answered.
  EXPECT_TRUE(AllEnded(tree));
  EXPECT_TRUE(Exited(run_leader));
  EXPECT_TRUE(ActiveGrants(state_dir, second.pid()).empty());  // the first's pool reaped too
  HttpClient c = second.Client();
  json s = c.Get("/v1/sessions/keep").Json();
  EXPECT_EQ(s["state"], "lost");
  EXPECT_EQ(Slurp(second.Workspace("keep") + "/file.txt"), "data\n");
  HttpResponse refused = c.Post("/v1/sessions/keep/exec", {{"command", "true"}});
  EXPECT_EQ(refused.status, 409);
  HttpResponse again = c.Post("/v1/sessions", {{"id", "keep"}});
  ASSERT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(again.Json()["generation"], 2);
  EXPECT_EQ(again.Json()["spec"]["workspace_reused"], true);
  EXPECT_EQ(c.Post("/v1/sessions/keep/exec", {{"command", "cat file.txt"}}).Json()["stdout"],
            "data\n");
  EXPECT_NE(second.Log().find("recovered_grant"), std::string::npos);
  // A lost session's workspace is swept when asked to.
  HttpResponse fresh = c.Post("/v1/sessions", {{"id", "fresh"}, {"fresh_workspace", true}});
  ASSERT_EQ(fresh.status, 201) << fresh.body;
  EXPECT_EQ(fresh.Json()["spec"]["workspace_reused"], false);
  EXPECT_EQ(c.Post("/v1/sessions/fresh/exec", {{"command", "ls -A | wc -l"}}).Json()["stdout"],
            "0\n");
}

TEST(DaemonEnvTest, NothingOfTheDaemonsEnvironmentReachesASessionOrARun) {
  ::setenv("OPENAI_API_KEY", "sk-must-not-leak", 1);
  ::setenv("DATABASE_URL", "postgres://user:secret@db/x", 1);
  DaemonProcess daemon;  // started with them in its environment
  ::unsetenv("OPENAI_API_KEY");
  ::unsetenv("DATABASE_URL");
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  HttpClient c = daemon.Client();
  ASSERT_EQ(c.Post("/v1/sessions", {{"id", "env"}}).status, 201);
  std::string session_env =
      c.Post("/v1/sessions/env/exec", {{"command", "env"}}).Json()["stdout"].get<std::string>();
  std::string run_env = c.Post("/v1/runs", {{"argv", {"/usr/bin/env"}}}).Json()["stdout"];
  for (const std::string& env : {session_env, run_env}) {
    EXPECT_EQ(env.find("sk-must-not-leak"), std::string::npos) << env;
    EXPECT_EQ(env.find("secret"), std::string::npos) << env;
  }
  EXPECT_EQ(run_env, "");
  EXPECT_NE(session_env.find("TERM=dumb"), std::string::npos);
}

TEST(DaemonLifecycleTest, IdleSessionsAreCulledWithVerifiedTeardown) {
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  HttpClient c = daemon.Client();
  ASSERT_EQ(c.Post("/v1/sessions", {{"id", "idle"}, {"ttl_s", 1}}).status, 201);
  ASSERT_EQ(c.Post("/v1/sessions", {{"id", "busy"}, {"ttl_s", 60}}).status, 201);
  std::string ns = c.Post("/v1/sessions/idle/exec", {{"command", kPrintTree}}).Json()["stdout"];
  std::vector<Process> tree = SandboxTree(ns);
  ASSERT_FALSE(tree.empty()) << ns;
  ASSERT_TRUE(Eventually([&] { return c.Get("/v1/sessions/idle").Json()["state"] == "closed"; }));
  EXPECT_TRUE(AllEnded(tree));
  EXPECT_NE(::access(daemon.Workspace("idle").c_str(), F_OK), 0);
  EXPECT_EQ(c.Get("/v1/sessions/busy").Json()["state"], "ready");
  EXPECT_NE(daemon.Log().find("session_culled"), std::string::npos);
}

TEST(DaemonLifecycleTest, SigtermTearsEverythingDownAndExitsZero) {
  TempDir work;
  std::vector<pid_t> pids;
  std::vector<std::vector<Process>> trees;
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  HttpClient c = daemon.Client();
  for (const char* id : {"one", "two"}) {
    ASSERT_EQ(c.Post("/v1/sessions", {{"id", id}}).status, 201);
    std::string ns = c.Post("/v1/sessions/" + std::string(id) + "/exec",
                            {{"command", "setsid sleep 300 & " + kPrintTree}})
                         .Json()["stdout"];
    trees.push_back(SandboxTree(ns));
    ASSERT_GE(trees.back().size(), VisibleTree()) << ns;
  }
  RawConnection run(daemon.url());
  std::string body =
      json({{"shell", "setsid sleep 300 & echo $! > " + (work / "run.pid") + "; sleep 300"},
            {"isolation", "none"}})
          .dump();
  run.Send("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + daemon.token() +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  auto pid = ReadPidFile(work / "run.pid");
  ASSERT_TRUE(pid);
  pids.push_back(*pid);
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(), 0) << daemon.Log();
  for (pid_t p : pids) EXPECT_TRUE(Exited(p)) << p;
  for (const auto& tree : trees) EXPECT_TRUE(AllEnded(tree)) << daemon.Log();
  EXPECT_TRUE(ActiveGrants(daemon.state_dir(), 0).empty());  // the pool's too, after SIGTERM
  std::string response = run.ReadUntil("cancelled", seconds(5));
  EXPECT_NE(response.find("\"outcome\":\"cancelled\""), std::string::npos) << response;
  auto store = store::Store::Open(daemon.state_dir());
  ASSERT_TRUE(store);
  auto sessions = store->ListSessions();
  ASSERT_TRUE(sessions);
  for (const auto& s : *sessions) EXPECT_EQ(s.state, "closed") << s.id << daemon.Log();
}

TEST(DaemonLimitsTest, OverCapacityIs429WithRetryAfter) {
  TempDir work;
  DaemonProcess daemon({"--max-sessions", "1", "--max-runs", "1"});
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  HttpClient c = daemon.Client();
  ASSERT_EQ(c.Post("/v1/sessions", {{"id", "first"}}).status, 201);
  HttpResponse second = c.Post("/v1/sessions", {{"id", "second"}});
  EXPECT_EQ(second.status, 429);
  EXPECT_FALSE(second.Header("Retry-After").empty());
  EXPECT_EQ(c.Post("/v1/sessions", {{"id", "first"}}).status, 200) << "a live id is returned";
  RawConnection run(daemon.url());
  std::string body = json({{"shell", "echo $$ > " + (work / "run.pid") + "; exec sleep 60"},
                           {"isolation", "none"}})
                         .dump();
  run.Send("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + daemon.token() +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_TRUE(ReadPidFile(work / "run.pid"));
  HttpResponse busy = c.Post("/v1/runs", {{"argv", {"/bin/true"}}});
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.Header("Retry-After"), "1");
  run.Close();
}

TEST(DaemonListenTest, AUnixSocketServesTheApi) {
  TempDir dir;
  std::string socket = dir / "cordon.sock";
  DaemonProcess daemon({"--listen", "unix:" + socket});
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  struct stat st {};
  ASSERT_EQ(::stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  HttpClient c("unix:" + socket, daemon.token());
  EXPECT_EQ(c.Get("/v1/health").status, 200);
  json r = c.Post("/v1/runs", {{"argv", {"/bin/echo", "over unix"}}}).Json();
  EXPECT_EQ(r["stdout"], "over unix\n");
  EXPECT_EQ(HttpClient("unix:" + socket, "").Get("/v1/probe").status, 401);
}

TEST(DaemonListenTest, ANonLoopbackAddressNeedsAllowRemote) {
  DaemonProcess daemon({"--listen", "0.0.0.0:0"});
  EXPECT_FALSE(daemon.ready());
  EXPECT_EQ(daemon.Wait(), 1);
  EXPECT_NE(daemon.Log().find("--allow-remote"), std::string::npos) << daemon.Log();
}

}  // namespace
}  // namespace cordon::testing
