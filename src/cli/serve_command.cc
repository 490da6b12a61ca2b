// cordon serve: the daemon (src/api). Parses options; everything else is the
// library's.
//
// The statically linked `cordon` cannot hold libzmq, so it does not run the
// daemon itself: after parsing (so --help and option errors need nothing
// else) it execs `cordon-serve` from its own directory with the same
// arguments (the same process: pid, signals and descriptors stay). That
// binary is this command again, linked dynamically with python sessions and
// the Kernel Gateway surface (src/gateway). Without it, the daemon runs
// here, with shell sessions only, and says so.
#include <limits.h>
#include <unistd.h>

extern char** environ;

#include <memory>

#include "api/log.h"
#include "api/serve.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/serve_command.h"
#include "cli/units.h"
#include "sys/fd.h"

namespace cordon::cli {
namespace {

constexpr std::string_view kName = "serve";

struct ServeArgs {
  std::vector<std::string> listen;
  bool allow_remote = false;
  bool reserve_disk = false;
  bool allow_network_host = false;
  std::string state_dir, token_file, cgroup_root;
  std::string max_body = "1M", max_header = "16K", max_file = "256M", ws_max_queued = "16M";
  std::string header_timeout = "10", body_timeout = "30", http_idle_timeout = "60",
              send_timeout = "60", max_connections = "1024", ws_ping_interval = "30",
              ws_idle_timeout = "120";
  std::string max_sessions = "64", max_runs = "32";
  std::string mcp_output_limit = "64K", mcp_session_ttl = "60m", mcp_max_sessions = "1024",
              keep_records = "7d";
  std::string idle_ttl = "20m", max_lifetime = "86400", verify_timeout = "5";
  std::string prespawn = "0", prespawn_shells = "2", prespawn_runs = "2", interrupt_grace = "10",
              kernel_ready_timeout = "60", max_kernels = "64", max_message = "64M";
  std::vector<std::string> kernel_env;
  // The bounds of every run and session: defaults and ceilings.
  std::string default_memory = "1G", default_pids = "512", default_cpu = "1", default_disk = "10G",
              default_inodes = "1048576";
  std::string max_memory, max_pids, max_cpu, max_disk, max_inodes;
  std::string min_isolation = "standard";
  std::map<std::string, CLI::Option*> options;
  bool Given(const std::string& name) const { return options.at(name)->count() > 0; }
};

// --default-* and --max-*: an error naming the option, or none.
std::optional<std::string> ParseBounds(const ServeArgs& a, contain::Bounds& b) {
  struct Integer {
    const char* option;
    const std::string& text;
    std::expected<int64_t, std::string> (*parse)(std::string_view);
    bool ceiling;
    std::function<void(int64_t)> set;
  };
  const Integer integers[] = {
      {"--default-memory", a.default_memory, ParseSize, false,
       [&](int64_t v) { b.memory_bytes = v; }},
      {"--default-pids", a.default_pids, ParseCount, false, [&](int64_t v) { b.pids = v; }},
      {"--default-disk", a.default_disk, ParseSize, false, [&](int64_t v) { b.disk_bytes = v; }},
      {"--default-inodes", a.default_inodes, ParseCount, false,
       [&](int64_t v) { b.disk_inodes = v; }},
      {"--max-memory", a.max_memory, ParseSize, true, [&](int64_t v) { b.max_memory_bytes = v; }},
      {"--max-pids", a.max_pids, ParseCount, true, [&](int64_t v) { b.max_pids = v; }},
      {"--max-disk", a.max_disk, ParseSize, true, [&](int64_t v) { b.max_disk_bytes = v; }},
      {"--max-inodes", a.max_inodes, ParseCount, true, [&](int64_t v) { b.max_disk_inodes = v; }},
  };
  for (const auto& n : integers) {
    if (n.ceiling && !a.Given(n.option)) continue;
    auto value = n.parse(n.text);
    if (!value) return std::string(n.option) + ": " + value.error();
    if (*value <= 0) return std::string(n.option) + ": must be positive";
    n.set(*value);
  }
  auto cpu = ParseCpus(a.default_cpu);
  if (!cpu) return "--default-cpu: " + cpu.error();
  b.cpu = *cpu;
  if (a.Given("--max-cpu")) {
    auto max = ParseCpus(a.max_cpu);
    if (!max) return "--max-cpu: " + max.error();
    b.max_cpu = *max;
  }
  auto floor = contain::ParseIsolation(a.min_isolation);
  if (!floor) return "--min-isolation: must be none, standard or strict";
  b.min_isolation = *floor;
  b.allow_network_host = a.allow_network_host;
  // A ceiling below a default that was not given lowers the default to it.
  auto lower = [&](auto& value, const auto& ceiling, const char* option) {
    if (ceiling && !a.Given(option) && value > *ceiling) value = *ceiling;
  };
  lower(b.memory_bytes, b.max_memory_bytes, "--default-memory");
  lower(b.pids, b.max_pids, "--default-pids");
  lower(b.cpu, b.max_cpu, "--default-cpu");
  lower(b.disk_bytes, b.max_disk_bytes, "--default-disk");
  lower(b.disk_inodes, b.max_disk_inodes, "--default-inodes");
  return contain::BoundsProblem(b);
}

// The options, or none once the error naming the option is printed.
std::optional<api::DaemonOptions> ToOptions(const ServeArgs& a, std::string_view kName) {
  api::DaemonOptions o;
  if (!a.listen.empty()) o.listen = a.listen;
  o.allow_remote = a.allow_remote;
  o.reserve_disk = a.reserve_disk;
  auto state = store::ResolveStateDir(Given(a.state_dir, a.Given("--state-dir")));
  if (!state) {
    PrintError(kName, state.error().message());
    return std::nullopt;
  }
  o.state_dir = *state;
  if (a.Given("--token-file")) o.token_file = a.token_file;
  if (a.Given("--cgroup-root")) {
    if (auto problem = contain::CgroupRootProblem(a.cgroup_root)) {
      PrintError(kName, "--cgroup-root: '" + a.cgroup_root + "' " + *problem);
      return std::nullopt;
    }
    o.cgroup_root = a.cgroup_root;
  }
  struct Numeric {
    const char* option;
    const std::string& text;
    std::expected<int64_t, std::string> (*parse)(std::string_view);
    std::function<void(int64_t)> set;
  };
  const Numeric numerics[] = {
      {"--max-body", a.max_body, ParseSize, [&](int64_t v) { o.http.body_bytes = v; }},
      {"--max-header", a.max_header, ParseSize,
       [&](int64_t v) { o.http.header_bytes = static_cast<uint32_t>(v); }},
      {"--max-file-size", a.max_file, ParseSize, [&](int64_t v) { o.max_file_bytes = v; }},
      {"--ws-max-queued", a.ws_max_queued, ParseSize,
       [&](int64_t v) { o.http.ws_queued_bytes = static_cast<uint64_t>(v); }},
      {"--header-timeout", a.header_timeout, ParseTimerMs,
       [&](int64_t v) { o.http.header_timeout = std::chrono::milliseconds(v); }},
      {"--body-timeout", a.body_timeout, ParseTimerMs,
       [&](int64_t v) { o.http.body_timeout = std::chrono::milliseconds(v); }},
      {"--idle-timeout", a.http_idle_timeout, ParseTimerMs,
       [&](int64_t v) { o.http.idle_timeout = std::chrono::milliseconds(v); }},
      {"--send-timeout", a.send_timeout, ParseTimerMs,
       [&](int64_t v) { o.http.send_timeout = std::chrono::milliseconds(v); }},
      {"--max-connections", a.max_connections, ParseCount,
       [&](int64_t v) { o.http.max_connections = static_cast<size_t>(v); }},
      {"--ws-ping-interval", a.ws_ping_interval, ParseTimerMs,
       [&](int64_t v) { o.http.ws_ping_interval = std::chrono::milliseconds(v); }},
      {"--ws-idle-timeout", a.ws_idle_timeout, ParseTimerMs,
       [&](int64_t v) { o.http.ws_idle_timeout = std::chrono::milliseconds(v); }},
      {"--max-sessions", a.max_sessions, ParseCount,
       [&](int64_t v) { o.sessions.max_sessions = static_cast<size_t>(v); }},
      {"--max-runs", a.max_runs, ParseCount,
       [&](int64_t v) { o.max_runs = static_cast<size_t>(v); }},
      {"--mcp-output-limit", a.mcp_output_limit, ParseSize,
       [&](int64_t v) { o.mcp_output_limit = static_cast<uint64_t>(v); }},
      {"--mcp-session-ttl", a.mcp_session_ttl, ParseTimerMs,
       [&](int64_t v) { o.mcp_session_ttl = std::chrono::milliseconds(v); }},
      {"--mcp-max-sessions", a.mcp_max_sessions, ParseCount,
       [&](int64_t v) { o.mcp_max_sessions = static_cast<size_t>(v); }},
      {"--keep-records", a.keep_records, ParseDurationMs,
       [&](int64_t v) { o.keep_records = std::chrono::milliseconds(v); }},
      {"--session-idle-ttl", a.idle_ttl, ParseTimerMs,
       [&](int64_t v) { o.sessions.idle_ttl = std::chrono::milliseconds(v); }},
      {"--session-max-lifetime", a.max_lifetime, ParseTimerMs,
       [&](int64_t v) { o.sessions.max_lifetime = std::chrono::milliseconds(v); }},
      {"--verify-timeout", a.verify_timeout, ParseTimerMs,
       [&](int64_t v) { o.verify_timeout = std::chrono::milliseconds(v); }},
  };
  for (const auto& n : numerics) {
    auto value = n.parse(n.text);
    if (!value) {
      PrintError(kName, std::string(n.option) + ": " + value.error());
      return std::nullopt;
    }
    if (*value <= 0) {
      PrintError(kName, std::string(n.option) + ": must be positive");
      return std::nullopt;
    }
    if (std::string_view(n.option) == "--max-header" && *value > (1 << 20)) {
      PrintError(kName, "--max-header: must be at most 1M");
      return std::nullopt;
    }
    n.set(*value);
  }
  if (o.http.ws_idle_timeout <= o.http.ws_ping_interval) {
    // A client would be cut off before it was ever asked for a pong.
    PrintError(kName, "--ws-idle-timeout: must be longer than --ws-ping-interval");
    return std::nullopt;
  }
  // The session pools' and the kernels' numbers (some may be 0).
  struct SessionNumeric {
    const char* option;
    const std::string& text;
    std::expected<int64_t, std::string> (*parse)(std::string_view);
    bool zero_ok;
    std::function<void(int64_t)> set;
  };
  const SessionNumeric session_numerics[] = {
      {"--prespawn", a.prespawn, ParseCount, true,
       [&](int64_t v) { o.gateway.prespawn = static_cast<size_t>(v); }},
      {"--prespawn-shells", a.prespawn_shells, ParseCount, true,
       [&](int64_t v) { o.sessions.prespawn_shells = static_cast<size_t>(v); }},
      {"--prespawn-runs", a.prespawn_runs, ParseCount, true,
       [&](int64_t v) { o.prespawn_runs = static_cast<size_t>(v); }},
      {"--interrupt-grace", a.interrupt_grace, ParseTimerMs, false,
       [&](int64_t v) { o.gateway.interrupt_grace = std::chrono::milliseconds(v); }},
      {"--kernel-ready-timeout", a.kernel_ready_timeout, ParseTimerMs, false,
       [&](int64_t v) { o.gateway.kernel_ready_timeout = std::chrono::milliseconds(v); }},
      {"--max-kernels", a.max_kernels, ParseCount, false,
       [&](int64_t v) { o.gateway.max_kernels = static_cast<size_t>(v); }},
      {"--max-message-size", a.max_message, ParseSize, false,
       [&](int64_t v) { o.gateway.max_message_bytes = static_cast<uint64_t>(v); }},
  };
  for (const auto& k : session_numerics) {
    auto value = k.parse(k.text);
    if (!value) {
      PrintError(kName, std::string(k.option) + ": " + value.error());
      return std::nullopt;
    }
    if (*value < 0 || (*value == 0 && !k.zero_ok)) {
      PrintError(kName, std::string(k.option) + ": must be positive");
      return std::nullopt;
    }
    k.set(*value);
  }
  if (auto failed = ParseBounds(a, o.bounds)) {
    PrintError(kName, *failed);
    return std::nullopt;
  }
  for (const auto& name : a.kernel_env) {
    if (name.empty() || name.find_first_of("=\0") != std::string::npos) {
      PrintError(kName, "--kernel-env: '" + name + "' is not a variable name");
      return std::nullopt;
    }
    o.gateway.env_allowlist.push_back(name);
  }
  return o;
}

void RegisterOptions(CLI::App* cmd, ServeArgs& a);

int Execute(const ServeArgs& a) {
  auto options = ToOptions(a, kName);
  if (!options) return kExitCordonFailed;
  api::DaemonOptions o = std::move(*options);
  if (ServeWithKernels()) return ServeWithKernels()(std::move(o));
  ExecKernelServe();  // returns only when cordon-serve is not there
  api::Log("warning", "no_kernels",
           {{"message",
             "cordon-serve was not found next to this binary: python sessions and the /api "
             "surface are not available"}});
  return api::Serve(std::move(o));
}

}  // namespace

std::function<int(api::DaemonOptions)>& ServeWithKernels() {
  static std::function<int(api::DaemonOptions)> serve;
  return serve;
}

void ExecKernelServe() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + "cordon-serve";
  if (::access(path.c_str(), X_OK) != 0) return;
  // The arguments exactly as given: /proc/self/cmdline, NUL-separated.
  auto cmdline = sys::ReadFile("/proc/self/cmdline", 1 << 20);
  if (!cmdline) return;
  std::vector<std::string> args;
  size_t start = 0;
  while (start < cmdline->size()) {
    size_t end = cmdline->find('\0', start);
    if (end == std::string::npos) end = cmdline->size();
    args.push_back(cmdline->substr(start, end - start));
    start = end + 1;
  }
  if (args.empty()) return;
  args[0] = path;
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::execve(path.c_str(), argv.data(), ::environ);
}

Command AddServeCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the daemon: the HTTP API for runs, shell sessions and their files (docs/api.md), "
      "and MCP at /mcp (docs/mcp.md). Every request but GET /v1/health needs the token. "
      "SIGTERM stops it after tearing everything down.");
  auto args = std::make_shared<ServeArgs>();
  RegisterOptions(cmd, *args);
  return Command{cmd, [args] { return Execute(*args); }};
}

std::function<std::optional<api::DaemonOptions>()> AddDaemonOptions(CLI::App* cmd,
                                                                    std::string command) {
  auto args = std::make_shared<ServeArgs>();
  RegisterOptions(cmd, *args);
  return [args, command] {
    if (args->Given("--listen") || args->Given("--allow-remote")) {
      PrintError(command, "--listen: cordon " + command +
                              " speaks on stdin and stdout; listening is cordon serve's "
                              "(which serves MCP at /mcp too)");
      return std::optional<api::DaemonOptions>();
    }
    return ToOptions(*args, command);
  };
}

std::function<int(api::DaemonOptions)>& McpWithKernels() {
  static std::function<int(api::DaemonOptions)> mcp;
  return mcp;
}

namespace {

void RegisterOptions(CLI::App* cmd, ServeArgs& a) {
  auto opt = [&](const std::string& name, std::string& target, const std::string& help) {
    a.options[name] = cmd->add_option(name, target, help);
    return a.options[name];
  };
  a.options["--listen"] =
      cmd->add_option("--listen", a.listen,
                      "Where to listen (repeatable): HOST:PORT or unix:/path; default "
                      "127.0.0.1:7419")
          ->type_name("ADDR")
          ->allow_extra_args(false);
  a.options["--allow-remote"] = cmd->add_flag(
      "--allow-remote", a.allow_remote,
      "Allow a non-loopback --listen address (other machines can then reach the daemon)");
  opt("--state-dir", a.state_dir, "As for cordon run; also holds workspaces and the token")
      ->type_name("DIR");
  opt("--token-file", a.token_file,
      "Read the token from FILE (default: <state>/token, generated with mode 0600 if missing)")
      ->type_name("FILE");
  opt("--cgroup-root", a.cgroup_root, "As for cordon run")->type_name("PATH");
  opt("--max-body", a.max_body, "Largest JSON body (default 1M)")->type_name("BYTES");
  opt("--max-header", a.max_header, "Largest request header (default 16K)")->type_name("BYTES");
  opt("--max-file-size", a.max_file, "Largest file in a workspace via the API (default 256M)")
      ->type_name("BYTES");
  opt("--ws-max-queued", a.ws_max_queued,
      "Bytes queued for one WebSocket client; a client that stops reading is disconnected "
      "(logged ws_slow_reader) and its kernel goes on (default 16M)")
      ->type_name("BYTES");
  opt("--header-timeout", a.header_timeout,
      "A request's header must arrive within this, from the accept (or, on a keep-alive "
      "connection, from its first byte); past it 408 and the connection closes (default 10)")
      ->type_name("SEC");
  opt("--body-timeout", a.body_timeout,
      "A request's body must arrive within this after its header; past it 408 and the "
      "connection closes (default 30)")
      ->type_name("SEC");
  opt("--idle-timeout", a.http_idle_timeout,
      "A keep-alive connection idle between requests is closed after this (default 60)")
      ->type_name("SEC");
  opt("--send-timeout", a.send_timeout,
      "While an answer is written, the client must take 64 KiB of it (or the rest) within "
      "each such interval, or be disconnected (logged http_slow_reader) (default 60)")
      ->type_name("SEC");
  opt("--max-connections", a.max_connections,
      "Open connections at once, WebSockets included; past it a new connection gets 503, "
      "and 16 more are kept for GET /v1/health (default 1024)")
      ->type_name("N");
  opt("--ws-ping-interval", a.ws_ping_interval,
      "A WebSocket client silent for this long is pinged (default 30)")
      ->type_name("SEC");
  opt("--ws-idle-timeout", a.ws_idle_timeout,
      "A WebSocket client that sent nothing, not even a pong, for this long is disconnected "
      "(default 120)")
      ->type_name("SEC");
  opt("--default-memory", a.default_memory,
      "Memory of every run and session whose request sets no limits.memory_bytes (default 1G)")
      ->type_name("BYTES");
  opt("--default-pids", a.default_pids,
      "Processes and threads of every run and session whose request sets no limits.pids "
      "(default 512)")
      ->type_name("N");
  opt("--default-cpu", a.default_cpu,
      "CPUs of time for every run and session whose request sets no limits.cpu (default 1)")
      ->type_name("CPUS");
  opt("--default-disk", a.default_disk,
      "Bytes of the workspace of every run and session whose request sets no limits.disk_bytes "
      "(default 10G)")
      ->type_name("BYTES");
  a.options["--reserve-disk"] = cmd->add_flag(
      "--reserve-disk", a.reserve_disk,
      "Reserve each workspace image's whole size when it is made (fallocate), so nothing "
      "written into it is lost to a full state filesystem; one that does not fit is 507 "
      "(default: images grow as written, and may together promise more than there is)");
  opt("--default-inodes", a.default_inodes,
      "Files and directories of that workspace, unless limits.disk_inodes (default 1048576)")
      ->type_name("N");
  opt("--max-memory", a.max_memory,
      "The most limits.memory_bytes a request may ask for; above it: 422 (default: no ceiling)")
      ->type_name("BYTES");
  opt("--max-pids", a.max_pids, "The most limits.pids a request may ask for (default: none)")
      ->type_name("N");
  opt("--max-cpu", a.max_cpu, "The most limits.cpu a request may ask for (default: none)")
      ->type_name("CPUS");
  opt("--max-disk", a.max_disk, "The most limits.disk_bytes a request may ask for (default: none)")
      ->type_name("BYTES");
  opt("--max-inodes", a.max_inodes,
      "The most limits.disk_inodes a request may ask for (default: none)")
      ->type_name("N");
  opt("--min-isolation", a.min_isolation,
      "The least isolation a run or session may ask for; below it: 422. none lets whoever "
      "holds the token, or an agent over MCP, run on the host as this daemon's user (default "
      "standard)")
      ->type_name("LEVEL");
  a.options["--allow-network-host"] = cmd->add_flag(
      "--allow-network-host", a.allow_network_host,
      "Let a run or session ask for the host's network (isolation.network host): its loopback "
      "services and all the host reaches, a cloud's metadata endpoint included (default: 422)");
  opt("--max-sessions", a.max_sessions,
      "Live sessions at once, quarantined ones counted (default 64)")
      ->type_name("N");
  opt("--max-runs", a.max_runs,
      "Runs in progress at once, counting answered runs whose teardown is not yet verified "
      "(default 32)")
      ->type_name("N");
  opt("--session-idle-ttl", a.idle_ttl,
      "Idle sessions are closed after this: nothing running or queued, the kernel not busy, no "
      "websocket client connected (default 20m)")
      ->type_name("SEC");
  opt("--session-max-lifetime", a.max_lifetime, "Sessions are closed after this (default 24h)")
      ->type_name("SEC");
  opt("--prespawn", a.prespawn,
      "Python kernels kept started and ready, handed to new python sessions whose request "
      "declares no env, limits or isolation of its own (default 0)")
      ->type_name("N");
  opt("--prespawn-shells", a.prespawn_shells,
      "Shells kept started and ready in their sandboxes, handed to new shell sessions whose "
      "request declares no env, limits or isolation of its own; 0 starts every shell on "
      "request (default 2)")
      ->type_name("N");
  opt("--prespawn-runs", a.prespawn_runs,
      "Sandboxes kept made and waiting for a command, each under a grant of its own, taken "
      "by runs (POST /v1/runs, MCP) that declare no workspace, limits or isolation of their "
      "own; 0 launches every run on request (default 2)")
      ->type_name("N");
  opt("--interrupt-grace", a.interrupt_grace,
      "After POST /api/kernels/{id}/interrupt, how long a busy kernel has to become idle "
      "before it is torn down (default 10)")
      ->type_name("SEC");
  opt("--kernel-ready-timeout", a.kernel_ready_timeout,
      "How long a new python kernel has to answer kernel_info before its session fails and "
      "the kernel is torn down (default 60; raise it on slow or emulated hosts)")
      ->type_name("SEC");
  opt("--max-kernels", a.max_kernels,
      "Live python sessions at once, quarantined ones counted; POST /api/kernels past it is 403 "
      "(default 64)")
      ->type_name("N");
  opt("--max-message-size", a.max_message,
      "Largest kernel message on a websocket, either way; a larger one is refused with an "
      "error message, never cut (default 64M)")
      ->type_name("BYTES");
  a.options["--kernel-env"] =
      cmd->add_option("--kernel-env", a.kernel_env,
                      "A variable name (repeatable) that POST /api/kernels may pass in env, "
                      "besides KERNEL_*")
          ->type_name("NAME")
          ->allow_extra_args(false);
  opt("--verify-timeout", a.verify_timeout,
      "How long after SIGKILL death must be seen before a teardown is unverified (default 5)")
      ->type_name("SEC");
  opt("--mcp-output-limit", a.mcp_output_limit,
      "The most bytes of each output stream (stdout, stderr), and of a python session's "
      "results and error, in an MCP tool result; past it the output is cut on a UTF-8 boundary "
      "and says how much was left out (default 64K)")
      ->type_name("BYTES");
  opt("--mcp-session-ttl", a.mcp_session_ttl,
      "An MCP session (Mcp-Session-Id at /mcp) idle this long is ended: its id gets 404, and "
      "the cordon sessions its tools created and left open are closed (default 60m)")
      ->type_name("SEC");
  opt("--mcp-max-sessions", a.mcp_max_sessions,
      "The most MCP sessions at /mcp at once: an initialize past it ends the least recently "
      "used one, as its TTL would (default 1024)")
      ->type_name("N");
  opt("--keep-records", a.keep_records,
      "Records of what ended longer ago than this are forgotten: released grants (cordon "
      "grants --all), and closed or invalidated sessions (their ids then get 404). Active "
      "grants, lost and quarantined sessions are kept, whatever their age. Checked at start "
      "and every tenth of this, at most every 10 minutes (default 7d)")
      ->type_name("SEC");
}

}  // namespace

}  // namespace cordon::cli
