// Python sessions and the Kernel Gateway-compatible surface, against a real
// `cordon serve` (which execs cordon-serve) and real Debian ipykernels, over
// loopback HTTP and WebSocket.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <filesystem>
#include <set>
#include <thread>

#include "daemon_process.h"
#include "jupyter/wire.h"

namespace cordon::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
namespace asio = boost::asio;
namespace beast = boost::beast;

template <typename F>
bool Eventually(F done, milliseconds within = seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return done();
}

// A blocking WebSocket client of /api/kernels/{id}/channels, as Jupyter
// clients use it: JSON text frames.
class Channels final {
 public:
  Channels(const std::string& url, const std::string& target) : ws_(io_) {
    // url: http://127.0.0.1:PORT
    std::string hostport = url.substr(7);
    std::string host = hostport.substr(0, hostport.rfind(':'));
    std::string port = hostport.substr(hostport.rfind(':') + 1);
    asio::ip::tcp::resolver resolver(io_);
    asio::connect(ws_.next_layer(), resolver.resolve(host, port));
    ws_.handshake(hostport, target);
  }
  void Send(const json& message) { ws_.write(asio::buffer(message.dump())); }
  // The next message, or null after an error or `within` without one (the
  // connection is then unusable).
  json Next(milliseconds within = seconds(60)) {
    beast::flat_buffer buffer;
    std::optional<beast::error_code> result;
    ws_.async_read(buffer, [&](beast::error_code ec, size_t) { result = ec; });
    io_.restart();
    io_.run_for(within);
    if (!result) {
      beast::error_code ignored;
      ws_.next_layer().close(ignored);
      io_.restart();
      io_.run_for(seconds(1));
      return nullptr;
    }
    if (*result) return nullptr;
    return json::parse(beast::buffers_to_string(buffer.data()), nullptr, false);
  }
  // Reads until a message of `msg_type` whose parent is `parent` (any
  // parent when empty) arrives; that message, or null.
  json Until(const std::string& msg_type, const std::string& parent = "") {
    for (int i = 0; i < 1000; ++i) {
      json m = Next();
      if (m.is_null()) return nullptr;
      if (m["msg_type"] == msg_type &&
          (parent.empty() || m["parent_header"].value("msg_id", "") == parent)) {
        return m;
      }
    }
    return nullptr;
  }
  // Sends an execute_request and collects its messages until both its
  // execute_reply and its idle have come (messages filtered by parent id).
  std::vector<json> Execute(const std::string& code, bool with_channel = true) {
    Start(code, with_channel);
    return Collect();
  }
  // Sends an execute_request; returns its msg_id.
  std::string Start(const std::string& code, bool with_channel = true) {
    std::string msg_id = jupyter::NewUuid();
    json m = {{"header",
               {{"msg_id", msg_id},
                {"msg_type", "execute_request"},
                {"session", "test"},
                {"username", "test"},
                {"version", "5.3"}}},
              {"parent_header", json::object()},
              {"content",
               {{"code", code},
                {"silent", false},
                {"store_history", true},
                {"user_expressions", json::object()},
                {"allow_stdin", false},
                {"stop_on_error", false}}}};
    if (with_channel) {
      m["channel"] = "shell";
      m["metadata"] = json::object();
      m["buffers"] = json::array();
    }
    Send(m);
    last_id_ = msg_id;
    return msg_id;
  }
  // The messages of the last request until its execute_reply and idle.
  std::vector<json> Collect() {
    const std::string msg_id = last_id_;
    std::vector<json> out;
    bool reply = false, idle = false;
    while (!(reply && idle)) {
      json next = Next();
      if (next.is_null()) break;
      if (next["parent_header"].value("msg_id", "") != msg_id) continue;
      out.push_back(next);
      if (next["msg_type"] == "execute_reply") reply = true;
      if (next["msg_type"] == "status" && next["content"]["execution_state"] == "idle") {
        idle = true;
      }
    }
    return out;
  }
  const std::string& last_id() const { return last_id_; }

 private:
  asio::io_context io_;
  beast::websocket::stream<asio::ip::tcp::socket> ws_;
  std::string last_id_;
};

json Find(const std::vector<json>& messages, const std::string& type) {
  for (const json& m : messages) {
    if (m["msg_type"] == type) return m;
  }
  return nullptr;
}

class PythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveIpykernel()) GTEST_SKIP() << "Debian's python3-ipykernel is not installed";
    daemon_.emplace(Args());
    ASSERT_TRUE(daemon_->ready()) << daemon_->Log();
    client_.emplace(daemon_->Client());
  }
  // The grace after an interrupt, in seconds (scaled on a slow host).
  static std::string Grace() { return std::to_string(2 * TimeScale()); }
  virtual std::vector<std::string> Args() { return {"--interrupt-grace", Grace()}; }

  json Create(const std::string& id, json extra = json::object()) {
    extra["id"] = id;
    extra["kind"] = "python";
    HttpResponse r = client_->Post("/v1/sessions", extra);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.Json();
  }
  json Exec(const std::string& id, const std::string& code, json extra = json::object()) {
    extra["code"] = code;
    HttpResponse r = client_->Post("/v1/sessions/" + id + "/exec", extra);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json();
  }
  // The kernel's own pid (as the host sees it: only without a pid namespace).
  pid_t KernelPid(const std::string& id) {
    json r = Exec(id, "import os\nos.getpid()");
    return std::stoi(r["results"][0]["data"]["text/plain"].get<std::string>());
  }
  json Kernel(const std::string& id) { return client_->Get("/api/kernels/" + id).Json(); }

  std::optional<DaemonProcess> daemon_;
  std::optional<HttpClient> client_;
};

TEST_F(PythonTest, ExecutesEveryKindOfOutputAndKeepsState) {
  for (const char* isolation : {"none", "standard"}) {
    SCOPED_TRACE(isolation);
    std::string id = std::string("py-") + isolation;
    json s = Create(id, {{"isolation", isolation}});
    EXPECT_EQ(s["kind"], "python");
    EXPECT_EQ(s["state"], "ready");
    EXPECT_EQ(s["execution_state"], "idle");

    json sum = Exec(id, "1+1");
    EXPECT_EQ(sum["status"], "ok");
    EXPECT_EQ(sum["results"][0]["data"]["text/plain"], "2");
    EXPECT_EQ(sum["execution_count"], 1);
    EXPECT_EQ(sum["timed_out"], false);
    EXPECT_EQ(sum["invalidated"], false);

    json printed = Exec(id, "import sys\nprint('out')\nprint('err', file=sys.stderr)");
    EXPECT_EQ(printed["stdout"], "out\n");
    EXPECT_EQ(printed["stderr"], "err\n");

    json shown = Exec(id, "from IPython.display import display, HTML\ndisplay(HTML('<b>x</b>'))");
    EXPECT_EQ(shown["results"][0]["data"]["text/html"], "<b>x</b>");

    json failed = Exec(id, "1/0");
    EXPECT_EQ(failed["status"], "error");
    EXPECT_EQ(failed["error"]["ename"], "ZeroDivisionError");
    EXPECT_FALSE(failed["error"]["traceback"].empty());

    Exec(id, "x = 21");
    EXPECT_EQ(Exec(id, "x * 2")["results"][0]["data"]["text/plain"], "42");
    // The workspace is the cwd, and HOME.
    json where = Exec(id, "import os\nprint(os.getcwd() == os.environ['HOME'])");
    EXPECT_EQ(where["stdout"], "True\n");
  }
}

TEST_F(PythonTest, FilesGoBothWaysBetweenTheKernelAndTheFilesApi) {
  Create("files", {{"isolation", "standard"}});
  Exec("files", "open('from_kernel.txt', 'w').write('kernel wrote this')");
  HttpResponse got = client_->Get("/v1/sessions/files/files/from_kernel.txt");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "kernel wrote this");
  HttpResponse put = client_->Request("PUT", "/v1/sessions/files/files/in/data.txt", "api wrote");
  EXPECT_EQ(put.status / 100, 2) << put.body;
  EXPECT_EQ(Exec("files", "print(open('in/data.txt').read())")["stdout"], "api wrote\n");
}

// What a cell's child process writes to fd 1 or 2 reaches the kernel
// through a pipe that a thread of ipykernel's reads. The cell's result holds
// all of it (none is left to follow the idle status), before what the cell
// prints once the child is done, even while other threads of the kernel
// hold the interpreter. And bytes that are not UTF-8 do not end that thread
// (ipykernel 6.17's did: every later child's output was lost, and a child
// writing more than the pipe holds hung, here until the deadline).
TEST_F(PythonTest, WhatAChildWritesIsInItsCellsResultWholeAndInOrder) {
  Create("child", {{"isolation", "standard"}});
  const std::string child =
      "import subprocess, sys\n"
      "subprocess.run([sys.executable, '-c', 'import os\\n"
      "os.write(1, b\"x\" * 100000); os.write(2, b\"y\" * 100000)'])\n";
  const json deadline = {{"timeout_ms", 60000 * TimeScale()}};
  for (int cell = 0; cell < 3; ++cell) {
    SCOPED_TRACE(cell);
    json wrote = Exec("child", child, deadline);
    EXPECT_EQ(wrote["status"], "ok");
    EXPECT_EQ(wrote["stdout"], std::string(100000, 'x'));
    EXPECT_EQ(wrote["stderr"], std::string(100000, 'y'));
  }

  json busy = Exec("child", R"py(import subprocess, sys, threading
stop = False
def spin():
    while not stop:
        pass
spinners = [threading.Thread(target=spin) for _ in range(4)]
for t in spinners: t.start()
subprocess.run([sys.executable, '-c', 'import os\nfor i in range(50): os.write(1, b"%d\\n" % i)'])
print('end')
stop = True
for t in spinners: t.join()
)py",
                   deadline);
  std::string lines;
  for (int i = 0; i < 50; ++i) lines += std::to_string(i) + "\n";
  EXPECT_EQ(busy["stdout"], lines + "end\n");

  json bad = Exec("child", "import os\nos.write(1, b'\\xff\\xfe then text\\n')");
  EXPECT_EQ(bad["stdout"], std::string("\xef\xbf\xbd\xef\xbf\xbd then text\n"));  // U+FFFD twice
  json after = Exec("child", child, deadline);
  EXPECT_EQ(after["stdout"], std::string(100000, 'x'));
}

TEST_F(PythonTest, OutputPastTheBudgetIsCutMarkedAndTheKernelStaysUsable) {
  // (The grace, 2 s by default, is scaled: on a slow host the interrupted
  // kernel takes longer to drain its flood and come back.)
  Create("big", {{"limits", {{"output_limit_bytes", 2000}, {"grace_ms", 2000 * TimeScale()}}}});
  json big = Exec("big", "for i in range(200000): print(i)");
  EXPECT_EQ(big["truncated"], true);
  EXPECT_NE(big["stdout"].get<std::string>().find("output truncated"), std::string::npos);
  EXPECT_LE(big["stdout"].get<std::string>().size(), 2200u);
  EXPECT_EQ(big["invalidated"], false);
  EXPECT_EQ(Exec("big", "'alive'")["results"][0]["data"]["text/plain"], "'alive'");
}

TEST_F(PythonTest, TheTimeoutLadderInterruptsThenTearsDown) {
  Create("ladder", {{"isolation", "none"}, {"limits", {{"grace_ms", 1500 * TimeScale()}}}});
  // Back to idle after SIGINT: usable. (The deadline is scaled too: on a
  // slow host it must fall while the code sleeps, not while IPython is
  // still preparing to run it, where ipykernel drops the request instead.)
  json slept = Exec("ladder", "import time\ntime.sleep(100)", {{"timeout_ms", 800 * TimeScale()}});
  EXPECT_EQ(slept["timed_out"], true);
  EXPECT_EQ(slept["invalidated"], false);
  EXPECT_EQ(slept["status"], "error");
  EXPECT_EQ(slept["error"]["ename"], "KeyboardInterrupt") << slept.dump();
  EXPECT_EQ(Exec("ladder", "'still here'")["results"][0]["data"]["text/plain"], "'still here'");

  // One that swallows KeyboardInterrupt: torn down, verified, invalidated.
  pid_t pid = KernelPid("ladder");
  json stuck = Exec("ladder",
                    "import time\nwhile True:\n  try:\n    time.sleep(100)\n"
                    "  except KeyboardInterrupt:\n    pass",
                    {{"timeout_ms", 800}});
  EXPECT_EQ(stuck["timed_out"], true);
  EXPECT_EQ(stuck["invalidated"], true);
  EXPECT_TRUE(Exited(pid));
  json s = client_->Get("/v1/sessions/ladder").Json();
  EXPECT_EQ(s["state"], "invalidated");
  EXPECT_EQ(s["execution_state"], "dead");
  EXPECT_EQ(client_->Post("/v1/sessions/ladder/exec", {{"code", "1"}}).status, 409);
  // The next create is a new generation, with a new kernel.
  json again = Create("ladder", {{"isolation", "none"}});
  EXPECT_EQ(again["generation"], 2);
  EXPECT_EQ(Exec("ladder", "1+2")["results"][0]["data"]["text/plain"], "3");
}

TEST_F(PythonTest, AKernelThatDiesIsReportedDeadRecordedAndCounted) {
  Create("dies", {{"isolation", "none"}});
  pid_t pid = KernelPid("dies");
  json r = Exec("dies", "import os\nos._exit(3)");
  EXPECT_EQ(r["invalidated"], true);
  EXPECT_TRUE(Exited(pid));
  json s = client_->Get("/v1/sessions/dies").Json();
  EXPECT_EQ(s["state"], "invalidated");
  EXPECT_EQ(s["execution_state"], "dead");
  EXPECT_NE(s["problem"]["message"].get<std::string>().find("the kernel died"), std::string::npos)
      << s.dump();
  HttpResponse metrics = client_->Get("/metrics");
  EXPECT_NE(metrics.body.find("cordon_runtimes_died_total{kind=\"python\"} 1"), std::string::npos)
      << metrics.body;

  // Killed between executions (by this test, which started nothing else).
  Create("killed", {{"isolation", "none"}});
  pid_t other = KernelPid("killed");
  ASSERT_EQ(::kill(other, SIGKILL), 0);
  EXPECT_TRUE(Eventually([&] { return Kernel("killed")["execution_state"] == "dead"; }));
}

TEST(PythonEnvTest, NothingOfTheDaemonsEnvironmentReachesAKernel) {
  if (!HaveIpykernel()) GTEST_SKIP() << "Debian's python3-ipykernel is not installed";
  ::setenv("OPENAI_API_KEY", "sk-must-not-leak-to-kernels", 1);
  DaemonProcess daemon;
  ::unsetenv("OPENAI_API_KEY");
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  HttpClient c = daemon.Client();
  for (const char* isolation : {"none", "standard"}) {
    SCOPED_TRACE(isolation);
    std::string id = std::string("env-") + isolation;
    ASSERT_EQ(c.Post("/v1/sessions", {{"id", id},
                                      {"kind", "python"},
                                      {"isolation", isolation},
                                      {"env", {{"DECLARED", "yes"}}}})
                  .status,
              201);
    json r = c.Post("/v1/sessions/" + id + "/exec",
                    {{"code",
                      "import os\n"
                      "def read(p):\n"
                      "  try:\n    return open(p, 'rb').read().decode(errors='replace')\n"
                      "  except Exception as e:\n    return ''\n"
                      "print(sorted(os.environ))\n"
                      "print(os.environ.get('DECLARED'))\n"
                      "print('sk-must-not' in read('/proc/1/environ'))\n" +
                          // Without isolation the kernel is root on the host and
                          // could read the daemon's /proc: only a sandbox hides it.
                          (std::string(isolation) == "none"
                               ? std::string("print(False)\n")
                               : "print('sk-must-not' in read('/proc/" +
                                     std::to_string(daemon.pid()) + "/environ'))\n")}})
                 .Json();
    std::string out = r["stdout"];
    EXPECT_EQ(out.find("OPENAI"), std::string::npos) << out;
    EXPECT_NE(out.find("\nyes\nFalse\nFalse\n"), std::string::npos) << out;
    // Exactly the declared variables and the allowlist, plus what ipykernel
    // sets in its own process.
    json names = json::parse(
        [&] {
          std::string list = out.substr(0, out.find('\n'));
          for (char& ch : list) ch = ch == '\'' ? '"' : ch;
          return list;
        }(),
        nullptr, false);
    ASSERT_TRUE(names.is_array()) << out;
    const std::set<std::string> allowed = {
        "DECLARED", "PATH", "HOME", "LANG", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR",
        // ipykernel's own, set inside the kernel process:
        "CLICOLOR", "GIT_PAGER", "PAGER", "MPLBACKEND", "PYDEVD_USE_FRAME_EVAL", "TERM"};
    for (const auto& name : names) EXPECT_TRUE(allowed.contains(name)) << name;
  }
}

TEST(PythonIsolationTest, TwoKernelsCannotSeeEachOthersWorkspaces) {
  if (!HaveIpykernel()) GTEST_SKIP() << "Debian's python3-ipykernel is not installed";
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  HttpClient c = daemon.Client();
  for (const char* id : {"a", "b"}) {
    ASSERT_EQ(
        c.Post("/v1/sessions", {{"id", id}, {"kind", "python"}, {"isolation", "standard"}}).status,
        201);
  }
  c.Post("/v1/sessions/a/exec", {{"code", "open('secret.txt','w').write('a only')"}});
  std::string code = "import os\n";
  code += "print(os.path.exists('" + daemon.Workspace("a") + "/secret.txt'))\n";
  code += "print(os.path.exists('" + daemon.state_dir() + "'))\n";
  code += "try:\n    os.listdir('" + daemon.state_dir() + "')\n    print('listed')\n";
  code += "except OSError:\n    print('closed')\n";
  code += "print([f for f in os.listdir('.') if f != '.ipython'])";
  json r = c.Post("/v1/sessions/b/exec", {{"code", code}}).Json();
  // Without namespaces the state directory is there by its host path (the
  // sandboxes pass through it to their workspaces), never listable.
  const bool own_view = SandboxNamespaces();
  EXPECT_EQ(r["stdout"], std::string("False\n") + (own_view ? "False" : "True") + "\nclosed\n[]\n")
      << r.dump();
}

TEST(PythonRecoveryTest, AfterSigkillNoKernelSurvivesAndSessionsAreLost) {
  if (!HaveIpykernel()) GTEST_SKIP() << "Debian's python3-ipykernel is not installed";
  TempDir state;
  std::string state_dir = state / "state";
  pid_t kernel = 0;
  {
    DaemonProcess first({}, state_dir);
    ASSERT_TRUE(first.ready()) << first.Log();
    HttpClient c = first.Client();
    ASSERT_EQ(
        c.Post("/v1/sessions", {{"id", "k"}, {"kind", "python"}, {"isolation", "none"}}).status,
        201);
    json r = c.Post("/v1/sessions/k/exec",
                    {{"code", "import os\nopen('data.txt','w').write('kept')\nos.getpid()"}})
                 .Json();
    kernel = std::stoi(r["results"][0]["data"]["text/plain"].get<std::string>());
    first.Signal(SIGKILL);
    EXPECT_EQ(first.Wait(), 128 + SIGKILL);
    EXPECT_FALSE(Exited(kernel));  // orphaned, still running...
  }
  DaemonProcess second({}, state_dir);
  ASSERT_TRUE(second.ready()) << second.Log();
  EXPECT_TRUE(Exited(kernel));  // ...and dead before the restarted daemon answered
  HttpClient c = second.Client();
  json s = c.Get("/v1/sessions/k").Json();
  EXPECT_EQ(s["state"], "lost");
  EXPECT_EQ(s["kind"], "python");
  EXPECT_EQ(Slurp(second.Workspace("k") + "/data.txt"), "kept");
  HttpResponse again = c.Post("/v1/sessions", {{"id", "k"}, {"kind", "python"}});
  ASSERT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(
      c.Post("/v1/sessions/k/exec", {{"code", "print(open('data.txt').read())"}}).Json()["stdout"],
      "kept\n");
}

// --- the Kernel Gateway surface ---

class GatewayTest : public PythonTest {
 protected:
  std::vector<std::string> Args() override {
    return {"--interrupt-grace", Grace(), "--max-kernels", "2"};
  }
  json CreateKernel(json body = json::object()) {
    HttpResponse r = client_->Post("/api/kernels", body);
    EXPECT_EQ(r.status, 201) << r.body;
    json model = r.Json();
    EXPECT_EQ(r.Header("location"), "/api/kernels/" + model.value("id", ""));
    return model;
  }
  std::unique_ptr<Channels> Connect(const std::string& id) {
    return std::make_unique<Channels>(daemon_->url(),
                                      "/api/kernels/" + id + "/channels?token=" + daemon_->token());
  }
};

TEST_F(GatewayTest, TheRestSurfaceAnswersAsTheKernelGatewayDoes) {
  EXPECT_TRUE(client_->Get("/api").Json().contains("version"));
  json specs = client_->Get("/api/kernelspecs").Json();
  EXPECT_EQ(specs["default"], "python3");
  json spec = specs["kernelspecs"]["python3"]["spec"];
  for (const char* key : {"display_name", "language", "interrupt_mode", "env", "metadata"}) {
    EXPECT_TRUE(spec.contains(key)) << key;
  }
  EXPECT_EQ(client_->Get("/api/kernelspecs/ruby").status, 404);

  json model = CreateKernel({{"name", "python3"}});
  const std::string id = model["id"];
  EXPECT_EQ(id.size(), 36u);
  EXPECT_EQ(model["name"], "python3");
  // No warm pool: 201 as soon as it is started, as Jupyter servers
  // answer, not once it is ready (about a second later); idle once it is.
  EXPECT_EQ(model["execution_state"], "starting") << model.dump();
  EXPECT_TRUE(Eventually([&] { return Kernel(id)["execution_state"] == "idle"; }, seconds(60)));
  EXPECT_EQ(model["connections"], 0);
  EXPECT_TRUE(model["last_activity"].is_string());
  // A cordon session too.
  json session = client_->Get("/v1/sessions/" + id).Json();
  EXPECT_EQ(session["kind"], "python");
  EXPECT_EQ(session["spec"]["isolation"]["level"], "standard");
  json list = client_->Get("/api/kernels").Json();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["id"], id);
  EXPECT_EQ(Kernel(id)["id"], id);

  // Errors: {"reason", "message"} with the gateway's statuses.
  HttpResponse unknown = client_->Get("/api/kernels/00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_TRUE(unknown.Json().contains("reason"));
  EXPECT_TRUE(unknown.Json().contains("message"));
  EXPECT_EQ(client_->Post("/api/kernels", {{"name", "ruby"}}).status, 404);
  HttpResponse bad = client_->Request("POST", "/api/kernels", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.Json()["reason"], "Bad Request");
  EXPECT_EQ(client_->Post("/api/kernels", {{"env", {{"KERNEL_X", 1}}}}).status, 400);
  HttpClient anonymous(daemon_->url(), "");
  HttpResponse denied = anonymous.Get("/api/kernels");
  EXPECT_EQ(denied.status, 401);
  EXPECT_TRUE(denied.Json().contains("reason"));
  EXPECT_EQ(anonymous.Get("/api/kernels?token=" + daemon_->token()).status, 200);
  EXPECT_EQ(anonymous.Get("/api/kernels?token=wrong").status, 401);

  // The kernel limit (--max-kernels 2): 403 Resource Limit.
  json second = CreateKernel();
  HttpResponse limited = client_->Post("/api/kernels", json::object());
  EXPECT_EQ(limited.status, 403);
  EXPECT_EQ(limited.Json()["reason"], "Resource Limit");

  // Restart: same id and workspace, state gone, new process.
  auto ws = Connect(id);
  ws->Execute("x = 5\nopen('kept.txt','w').write('yes')");
  HttpResponse restarted = client_->Request("POST", "/api/kernels/" + id + "/restart");
  EXPECT_EQ(restarted.status, 200) << restarted.body;
  EXPECT_EQ(restarted.Json()["id"], id);
  auto after = Connect(id);
  json name_error = Find(after->Execute("x"), "error");
  EXPECT_EQ(name_error["content"]["ename"], "NameError");
  json kept = Find(after->Execute("print(open('kept.txt').read())"), "stream");
  EXPECT_EQ(kept["content"]["text"], "yes\n");

  // Delete: 204, gone, the slot free again.
  EXPECT_EQ(client_->Request("DELETE", "/api/kernels/" + second["id"].get<std::string>()).status,
            204);
  EXPECT_EQ(client_->Get("/api/kernels/" + second["id"].get<std::string>()).status, 404);
  CreateKernel();
}

TEST_F(GatewayTest, OnlyKernelVariablesAndTheAllowlistPass) {
  json model = CreateKernel({{"env", {{"KERNEL_USERNAME", "alice"}, {"LD_PRELOAD", "/evil.so"}}}});
  auto ws = Connect(model["id"]);
  json out = Find(ws->Execute("import os\nprint(os.environ.get('KERNEL_USERNAME'), "
                              "os.environ.get('LD_PRELOAD'))"),
                  "stream");
  EXPECT_EQ(out["content"]["text"], "alice None\n");
}

TEST_F(GatewayTest, TheChannelsRelayExecutionsToEveryClient) {
  json model = CreateKernel();
  const std::string id = model["id"];
  auto a = Connect(id);
  auto b = Connect(id);
  EXPECT_TRUE(Eventually([&] { return Kernel(id)["connections"] == 2; }));
  auto messages = a->Execute("1+1");
  json reply = Find(messages, "execute_reply");
  ASSERT_TRUE(reply.is_object());
  EXPECT_EQ(reply["channel"], "shell");
  EXPECT_EQ(reply["content"]["status"], "ok");
  EXPECT_TRUE(reply.contains("msg_id"));
  json result = Find(messages, "execute_result");
  EXPECT_EQ(result["content"]["data"]["text/plain"], "2");
  EXPECT_EQ(result["channel"], "iopub");
  // The other client saw the same iopub stream (not the reply). Before it,
  // b may have seen any number of the statuses of the daemon's readiness
  // requests (the kernel was starting when both connected).
  json seen = b->Until("execute_result", a->last_id());
  ASSERT_TRUE(seen.is_object()) << "b never saw a's execute_result";
  EXPECT_EQ(seen["channel"], "iopub");
  // Missing channel, metadata, buffers and header.date are accepted.
  auto shorthand = a->Execute("print('short')", false);
  EXPECT_EQ(Find(shorthand, "stream")["content"]["text"], "short\n");
  // A traceback.
  json error = Find(a->Execute("raise ValueError('bad')"), "error");
  EXPECT_EQ(error["content"]["ename"], "ValueError");
}

TEST_F(GatewayTest, AnInterruptBringsItBackOrTheKernelIsTornDown) {
  json model = CreateKernel();
  const std::string id = model["id"];
  auto ws = Connect(id);
  // Interrupt a sleep (once it has begun: the kernel ignores SIGINT between
  // executions): idle again, kept.
  std::string request = ws->Start("import time\nprint('sleeping', flush=True)\ntime.sleep(100)");
  ASSERT_TRUE(ws->Until("stream", request).is_object());
  EXPECT_EQ(client_->Request("POST", "/api/kernels/" + id + "/interrupt").status, 204);
  auto messages = ws->Collect();
  // ipykernel reports it in the reply (and on stderr), not always as `error`.
  EXPECT_EQ(Find(messages, "execute_reply")["content"]["ename"], "KeyboardInterrupt");
  EXPECT_EQ(Kernel(id)["execution_state"], "idle");
  auto kept = ws->Execute("'kept'");
  EXPECT_EQ(Find(kept, "execute_result")["content"]["data"]["text/plain"], "'kept'")
      << json(kept).dump();

  // A kernel that swallows KeyboardInterrupt: torn down after the grace,
  // dead, and connected clients told so.
  request = ws->Start(
      "import time\nwhile True:\n  try:\n    print('looping', flush=True)\n"
      "    time.sleep(100)\n  except KeyboardInterrupt:\n    pass");
  ASSERT_TRUE(ws->Until("stream", request).is_object());
  EXPECT_EQ(client_->Request("POST", "/api/kernels/" + id + "/interrupt").status, 204);
  json dead = ws->Until("status");
  while (dead.is_object() && dead["content"]["execution_state"] != "dead") {
    dead = ws->Until("status");
  }
  ASSERT_TRUE(dead.is_object()) << daemon_->Log();
  EXPECT_EQ(Kernel(id)["execution_state"], "dead");
  // A new kernel is unaffected.
  json fresh = CreateKernel();
  EXPECT_EQ(
      Find(Connect(fresh["id"])->Execute("1+1"), "execute_result")["content"]["data"]["text/plain"],
      "2");
}

}  // namespace
}  // namespace cordon::testing

namespace cordon::testing {
namespace {

class GatewayLimitsTest : public GatewayTest {
 protected:
  std::vector<std::string> Args() override { return {"--max-message-size", "64K"}; }
};

TEST_F(GatewayLimitsTest, AMessageOverTheFrameLimitIsRefusedNeverCut) {
  json model = CreateKernel();
  auto ws = Connect(model["id"]);
  auto messages = ws->Execute("print('x' * 200000)\nprint('after')");
  json refused = Find(messages, "error");
  ASSERT_TRUE(refused.is_object());
  EXPECT_EQ(refused["content"]["ename"], "CordonRelayError");
  EXPECT_NE(refused["content"]["evalue"].get<std::string>().find("over the limit"),
            std::string::npos);
  for (const json& m : messages) {
    if (m["msg_type"] == "stream") {
      // Whatever was relayed is whole: no cut stream of x's.
      std::string text = m["content"]["text"];
      EXPECT_TRUE(text.find('x') == std::string::npos || text.size() >= 200000) << text.size();
    }
  }
  EXPECT_EQ(Find(messages, "execute_reply")["content"]["status"], "ok");
}

class PoolTest : public GatewayTest {
 protected:
  std::vector<std::string> Args() override { return {"--prespawn", "1"}; }
  size_t Warm() { return client_->Get("/v1/health").Json().value("kernels_warm", 0); }
};

TEST_F(PoolTest, AWarmKernelIsHandedOutOnlyToARequestThatDeclaresNothing) {
  if (const auto& ns = TestProbe().isolation.namespaces; !ns.available) {
    // A warm kernel must see its workspace at /workspace: without
    // namespaces the daemon keeps none, and says why at start.
    EXPECT_NE(daemon_->Log().find("warm_pools_off"), std::string::npos) << daemon_->Log();
    EXPECT_EQ(Warm(), 0u);
    GTEST_SKIP() << "no warm pool where sandboxes have no namespaces: " << ns.problem;
  }
  ASSERT_TRUE(Eventually([&] { return Warm() == 1; }, seconds(60)));
  auto started = std::chrono::steady_clock::now();
  json model = CreateKernel();
  auto took = std::chrono::steady_clock::now() - started;
  const std::string id = model["id"];
  EXPECT_LT(took, milliseconds(500));
  EXPECT_EQ(model["execution_state"], "idle");  // a warm kernel is ready at once
  json session = client_->Get("/v1/sessions/" + id).Json();
  EXPECT_EQ(session["spec"].value("warm", false), true);
  // It was started with the daemon's default bounds, its workspace's disk
  // included (moved, mounted, onto the session's path).
  EXPECT_EQ(session["limits"]["memory_bytes"], int64_t{1} << 30);
  json probe = client_->Get("/v1/probe").Json();
  for (const auto& c : probe["capabilities"]) {
    if (c["capability"] != "disk") continue;
    const json& enforced = session["grant"]["enforced"];
    EXPECT_EQ(std::find(enforced.begin(), enforced.end(), "disk") != enforced.end(),
              c["enforceable"].get<bool>())
        << session.dump();
  }
  // Its workspace is the session's own, at /workspace inside.
  auto ws = Connect(id);
  json out =
      Find(ws->Execute("import os\nopen('w.txt','w').write('warm')\nprint(os.getcwd())"), "stream");
  EXPECT_EQ(out["content"]["text"], "/workspace\n");
  EXPECT_EQ(client_->Get("/v1/sessions/" + id + "/files/w.txt").body, "warm");
  // The pool refills in the background.
  EXPECT_TRUE(Eventually([&] { return Warm() == 1; }, seconds(60)));
  // A request that declares env starts cold: exactly its environment.
  json cold = CreateKernel({{"env", {{"KERNEL_ID_HINT", "x"}}}});
  EXPECT_FALSE(client_->Get("/v1/sessions/" + cold["id"].get<std::string>())
                   .Json()["spec"]
                   .value("warm", false));
  // SIGTERM with a pool: everything torn down, exit 0.
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(), 0) << daemon_->Log();
}

}  // namespace
}  // namespace cordon::testing
