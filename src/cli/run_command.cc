// cordon run: one command inside the boundary.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/units.h"
#include "closure/program.h"
#include "contain/policy.h"
#include "contain/probe.h"
#include "contain/probe_cache.h"
#include "run/run_sync.h"
#include "sys/fd.h"
#include "sys/signalfd.h"
#include "sys/text.h"

namespace cordon::cli {
namespace {

constexpr std::string_view kName = "run";

struct RunArgs {
  std::vector<std::string> command;
  std::string shell;
  std::string workspace;
  std::vector<std::string> env;
  std::string stdin_source;
  std::string timeout, grace, output_limit, memory, pids, cpu_seconds, file_size, open_files,
      address_space, cpus;
  std::vector<std::string> require;
  std::string isolation, network, tmp_size, policy;
  std::vector<std::string> ro_binds, binds;
  bool permissive = false;
  bool json = false;
  bool quiet = false;
  std::string owner;
  std::string state_dir;
  std::string cgroup_root;
  std::string closure;
  std::string pin;
  std::map<std::string, CLI::Option*> options;

  bool Given(const std::string& name) const { return options.at(name)->count() > 0; }
};

// The CLI option behind each Spec field, so a validation error names what
// the user typed.
const std::map<std::string, std::string> kOptionForField = {
    {"argv", "the command"},
    {"shell", "--shell"},
    {"workspace", "--workspace"},
    {"env", "--env"},
    {"owner", "--owner"},
    {"limits.timeout_ms", "--timeout"},
    {"limits.grace_ms", "--grace"},
    {"limits.output_limit_bytes", "--output-limit"},
    {"limits.memory_bytes", "--memory"},
    {"limits.pids", "--pids"},
    {"limits.cpu_seconds", "--cpu-seconds"},
    {"limits.file_size_bytes", "--file-size"},
    {"limits.open_files", "--open-files"},
    {"limits.address_space_bytes", "--address-space"},
    {"limits.cpu", "--cpus"},
    {"binds", "--bind/--ro-bind"},
    {"tmp_size_bytes", "--tmp-size"},
    {"uid_range", "--policy: uid_range"},
    {"system_dirs", "--policy: system_dirs"},
    {"hidden_paths", "--policy: hidden_paths"},
    {"seccomp.deny", "--policy: seccomp.deny"},
};

// "SRC" or "SRC:DST" (--ro-bind, --bind).
std::optional<std::string> ParseBind(const std::string& option, const std::string& text,
                                     bool writable, std::vector<contain::Bind>& out) {
  size_t colon = text.find(':');
  contain::Bind b{text.substr(0, colon), colon == std::string::npos ? text : text.substr(colon + 1),
                  writable};
  if (b.source.empty() || b.target.empty()) {
    return option + ": '" + text + "' is not SRC or SRC:DST";
  }
  out.push_back(std::move(b));
  return std::nullopt;
}

// The user's name from /etc/passwd, else "uid:N". The binary is static, so
// getpwuid (NSS, dlopen) is avoided; a label needs no directory service.
std::string DefaultOwner() {
  uid_t uid = ::geteuid();
  std::string fallback = "uid:" + std::to_string(uid);
  auto passwd = sys::ReadFile("/etc/passwd", 4 << 20);
  if (!passwd) return fallback;
  std::string_view rest(*passwd);
  while (!rest.empty()) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    // name:password:uid:...
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    size_t c3 = c2 == std::string_view::npos ? c2 : line.find(':', c2 + 1);
    if (c3 == std::string_view::npos) continue;
    if (line.substr(c2 + 1, c3 - c2 - 1) == std::to_string(uid)) {
      return std::string(line.substr(0, c1));
    }
  }
  return fallback;
}

// Fills `spec` from the arguments; on a bad value returns the message.
// The policy file comes first: every option given on the command line
// overrides it (a list option replaces the file's list).
std::optional<std::string> BuildSpec(const RunArgs& a, contain::Spec& spec) {
  if (a.Given("--policy")) {
    auto text = sys::ReadFile(a.policy, 1 << 20);
    if (!text) return "--policy: " + text.error().message();
    if (auto bad = contain::ApplyPolicy(*text, spec)) {
      return "--policy " + a.policy + ": " + bad->message();
    }
  }
  contain::IsolationSpec& iso = spec.isolation;
  if (a.Given("--isolation")) {
    auto level = contain::ParseIsolation(a.isolation);
    if (!level) return "--isolation: '" + a.isolation + "' is not none, standard or strict";
    iso.level = *level;
  }
  if (a.Given("--network")) {
    auto network = contain::ParseNetwork(a.network);
    if (!network) return "--network: '" + a.network + "' is not none or host";
    iso.network = *network;
  }
  for (auto [option, list, writable] :
       {std::tuple{"--ro-bind", &a.ro_binds, false}, std::tuple{"--bind", &a.binds, true}}) {
    if (!a.Given(option)) continue;
    std::erase_if(iso.binds, [&](const contain::Bind& b) { return b.writable == writable; });
    for (const auto& text : *list) {
      if (auto bad = ParseBind(option, text, writable, iso.binds)) return bad;
    }
  }
  if (a.Given("--tmp-size")) {
    auto size = ParseSize(a.tmp_size);
    if (!size) return "--tmp-size: " + size.error();
    iso.tmp_size_bytes = *size;
  }
  // Asked for, but nothing would give it: said, not silently dropped.
  if (!iso.enabled() && a.Given("--network") && iso.network == contain::Network::kNone) {
    return "--network: none needs isolation (standard or strict); with --isolation none the "
           "command shares the host's network";
  }
  if (!iso.enabled() && a.Given("--tmp-size")) {
    return "--tmp-size: the private /tmp needs isolation (standard or strict), not none";
  }
  if (a.Given("--shell")) {
    if (!a.command.empty()) return "give either --shell 'CMD' or -- PROG ARGS..., not both";
    spec.shell = a.shell;
  } else {
    if (a.command.empty()) {
      return "no command given: use cordon run [options] -- PROG ARGS... or --shell 'CMD'";
    }
    spec.argv = a.command;
  }
  if (a.Given("--workspace")) {
    if (a.workspace.empty()) return "--workspace: the path is empty";
    std::error_code ec;
    spec.workspace = std::filesystem::absolute(a.workspace, ec);
    if (ec) return "--workspace: " + ec.message();
  } else if (iso.enabled()) {
    // Named, so that it is checked like one given (it is shown inside).
    std::error_code ec;
    spec.workspace = std::filesystem::current_path(ec);
    if (ec) return "--workspace: the current directory: " + ec.message();
  }
  for (const auto& entry : a.env) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos) return "--env: '" + entry + "' is not NAME=VALUE";
    spec.env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }

  contain::Limits& l = spec.limits;
  using Parser = std::expected<int64_t, std::string> (*)(std::string_view);
  struct Numeric {
    const char* option;
    const std::string& text;
    Parser parse;
    std::function<void(int64_t)> set;
  };
  const Numeric numerics[] = {
      {"--timeout", a.timeout, ParseDurationMs, [&](int64_t v) { l.timeout_ms = v; }},
      {"--grace", a.grace, ParseDurationMs, [&](int64_t v) { l.grace_ms = v; }},
      {"--output-limit", a.output_limit, ParseSize, [&](int64_t v) { l.output_limit_bytes = v; }},
      {"--memory", a.memory, ParseSize, [&](int64_t v) { l.memory_bytes = v; }},
      {"--pids", a.pids, ParseCount, [&](int64_t v) { l.pids = v; }},
      {"--cpu-seconds", a.cpu_seconds, ParseCount, [&](int64_t v) { l.cpu_seconds = v; }},
      {"--file-size", a.file_size, ParseSize, [&](int64_t v) { l.file_size_bytes = v; }},
      {"--open-files", a.open_files, ParseCount, [&](int64_t v) { l.open_files = v; }},
      {"--address-space", a.address_space, ParseSize,
       [&](int64_t v) { l.address_space_bytes = v; }},
  };
  for (const auto& n : numerics) {
    if (!a.Given(n.option)) continue;
    auto value = n.parse(n.text);
    if (!value) return std::string(n.option) + ": " + value.error();
    n.set(*value);
  }
  if (a.Given("--cpus")) {
    auto cpus = ParseCpus(a.cpus);
    if (!cpus) return "--cpus: " + cpus.error();
    l.cpu = *cpus;
  }

  for (const auto& list : a.require) {
    for (std::string_view name : sys::SplitCommas(list)) {
      if (name.empty()) continue;
      auto cap = contain::ParseCapability(std::string(name));
      if (!cap) {
        return "--require: unknown capability '" + std::string(name) + "' (known: " +
               sys::JoinNames(contain::kAllCapabilities |
                              std::views::transform(contain::CapabilityName)) +
               ")";
      }
      spec.required.insert(*cap);
    }
  }
  spec.permissive = a.permissive;
  spec.owner = a.Given("--owner") ? a.owner : DefaultOwner();
  if (a.Given("--owner") && a.owner.empty()) return "--owner: the name is empty";
  if (a.Given("--pin") && !a.Given("--closure")) {
    return "--pin: pins a closure; give --closure DIR too";
  }
  if (a.Given("--cgroup-root")) {
    if (auto problem = contain::CgroupRootProblem(a.cgroup_root)) {
      return "--cgroup-root: '" + a.cgroup_root + "' " + *problem;
    }
  }
  if (auto invalid = contain::Validate(spec)) {
    auto option = kOptionForField.find(invalid->field);
    return (option == kOptionForField.end() ? invalid->field : option->second) + ": " +
           invalid->reason;
  }
  return std::nullopt;
}

// --stdin, once every other option is known good: the command reads the
// file (or cordon's own stdin) itself, as it comes, through `held`. A
// terminal is read here to its end instead (at most 1 GiB), so the
// command never holds the terminal cordon was started from.
std::optional<std::string> OpenStdin(const RunArgs& a, contain::Spec& spec, sys::UniqueFd& held) {
  if (!a.Given("--stdin")) return std::nullopt;
  int fd = STDIN_FILENO;
  if (a.stdin_source != "-") {
    auto opened = sys::Open(a.stdin_source, O_RDONLY);
    if (!opened) return "--stdin: " + opened.error().message();
    fd = opened->get();
    held = std::move(*opened);
  } else {
    int dup = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
    if (dup < 0) return "--stdin: " + sys::Error::FromErrno("fcntl(0, F_DUPFD_CLOEXEC)").message();
    held.reset(dup);
  }
  if (!::isatty(fd)) return std::nullopt;
  constexpr size_t kMaxTerminalInput = size_t{1} << 30;
  auto bytes = sys::ReadAll(fd, kMaxTerminalInput + 1);
  held.reset();
  if (!bytes) return "--stdin: " + bytes.error().message();
  if (bytes->size() > kMaxTerminalInput) return "--stdin: more than 1 GiB from a terminal";
  spec.stdin_bytes = std::move(*bytes);
  return std::nullopt;
}

// Verifies --closure against --pin and finds the program in it.
std::expected<closure::ClosureProgram, std::string> VerifyProgram(
    const RunArgs& a, const contain::Spec& spec, std::optional<closure::Verification>& verified) {
  if (spec.shell)
    return std::unexpected(
        "--closure runs a program of the closure: give -- PROG ARGS, not --shell");
  auto v = VerifyClosureOption(a.closure, a.Given("--pin"), a.pin);
  if (!v) return std::unexpected(v.error());
  verified = std::move(*v);
  auto program = closure::ResolveProgram(*verified, a.closure, spec.argv[0]);
  if (!program) {
    return std::unexpected("--closure: " + std::string(closure::RuleName(program.error().rule)) +
                           ": " + program.error().message);
  }
  return *program;
}

// After a pass-through run: what the exit status alone does not say.
// `cancel_signal`: the signal that cancelled the run (Ctrl-C), if any.
void Explain(const run::RunResult& r, const contain::Spec& spec, int cancel_signal) {
  auto note = [](const std::string& line) { PrintError(kName, line); };
  if (r.setup_error) {
    const contain::SetupError& e = *r.setup_error;
    note("cannot start " + spec.Command()[0] + ": " + std::string(contain::SetupStepName(e.step)) +
         (e.detail.empty() ? "" : " (" + e.detail + ")") + ": " +
         sys::Error("", e.err).message().substr(2));
  }
  const std::string torn_down =
      std::string("the tree was torn down with ") +
      (r.release.escalated ? "SIGKILL after the grace period" : "SIGTERM");
  if (r.outcome == run::Outcome::kTimedOut) {
    note("timed out after " + std::to_string(*spec.limits.timeout_ms) + " ms; " + torn_down);
  }
  if (r.outcome == run::Outcome::kCancelled && cancel_signal != 0 && r.release.dead) {
    note("cancelled by " + sys::SignalName(cancel_signal) + "; " + torn_down);
  }
  if (r.outcome == run::Outcome::kOomKilled) note("killed: out of memory (--memory)");
  for (const auto* s : {&r.out, &r.err}) {
    if (s->truncated) {
      note(std::string(s == &r.out ? "stdout" : "stderr") + " truncated: kept " +
           std::to_string(s->data.size()) + " of " + std::to_string(s->bytes) +
           " bytes (--output-limit)");
    }
  }
  if (!r.release.dead) {
    std::string pids;
    for (pid_t p : r.release.survivors) pids += (pids.empty() ? "" : " ") + std::to_string(p);
    note("teardown could not be verified (" + r.release.problem +
         "); survivors: " + (pids.empty() ? "unknown" : pids) + "; the grant " + r.grant.id +
         " stays active: run `cordon reap` to retry");
  }
  for (const auto& w : r.warnings) note("warning: " + w);
}

int Execute(const RunArgs& a) {
  contain::Spec spec;
  sys::UniqueFd stdin_file;
  std::optional<std::string> bad = BuildSpec(a, spec);
  if (!bad) bad = OpenStdin(a, spec, stdin_file);
  if (bad) {
    if (a.json) {
      PrintJson({{"error", {{"code", "invalid"}, {"message", *bad}}}});
    } else {
      PrintError(kName, *bad + " (see cordon run --help)");
    }
    return kExitCordonFailed;
  }
  auto store = OpenStore(kName, cli::Given(a.state_dir, a.Given("--state-dir")));
  if (!store) return kExitCordonFailed;
  contain::ProbeOptions probe_options;
  if (a.Given("--cgroup-root")) probe_options.cgroups.cgroup_root = a.cgroup_root;
  probe_options.isolation = spec.isolation.enabled();
  // The namespace observation is cached beside the store (keyed by the
  // boot, this binary, the caller's credentials and namespaces, and the
  // sysctls: contain/probe_cache.h); `cordon probe` always looks afresh.
  const std::string probe_cache =
      std::filesystem::path(store->path()).parent_path() / "probe-cache";
  auto probe = contain::ProbeHostCached(probe_options, probe_cache);
  if (!probe) {
    PrintError(kName, "cannot probe this host: " + probe.error().message());
    return kExitCordonFailed;
  }

  run::SyncOptions options;
  options.cancel_on_signals = true;
  // A pinned closure: verified now, and the program runs from its verified
  // descriptor. Both stay alive until the run is over.
  std::optional<closure::Verification> verified;
  if (a.Given("--closure")) {
    auto program = VerifyProgram(a, spec, verified);
    if (!program) {
      if (a.json) {
        PrintJson({{"error", {{"code", "closure"}, {"message", program.error()}}}});
      } else {
        PrintError(kName, program.error());
      }
      return kExitCordonFailed;
    }
    options.execution.exec_fd = program->fd;
    options.execution.exec_fd_is_script = program->script;
    // Inside a sandbox the closure is shown read-only where it is, so its
    // files can find each other; what runs is still the verified descriptor.
    if (spec.isolation.enabled()) {
      std::error_code ec;
      std::string where = std::filesystem::absolute(a.closure, ec).lexically_normal().string();
      while (where.size() > 1 && where.back() == '/') where.pop_back();
      spec.isolation.binds.push_back(contain::Bind{where, where, false});
    }
  }
  options.pass_through = !a.json;
  if (stdin_file) options.execution.stdin_fd = stdin_file.get();
  auto ran = run::RunSync(spec, *probe, *store, options);
  // A launch that failed may have failed on a cached claim gone stale (the
  // namespaces refused since): the next run observes them again.
  if (!ran ? ran.error().kind == contain::AdmitError::Kind::kInternal
           : ran->result.outcome == run::Outcome::kSetupFailed) {
    contain::DropNamespaceProbe(probe_cache);
  }
  if (!ran) {
    const contain::AdmitError& e = ran.error();
    std::string field = e.field;
    std::string message = e.message;
    if (auto option = kOptionForField.find(field); option != kOptionForField.end()) {
      message = option->second + message.substr(field.size());
    }
    if (a.json) {
      const char* code = e.kind == contain::AdmitError::Kind::kRefused   ? "refused"
                         : e.kind == contain::AdmitError::Kind::kInvalid ? "invalid"
                                                                         : "internal";
      nlohmann::json missing = nlohmann::json::array();
      for (const auto& m : e.missing) {
        missing.push_back(
            {{"capability", contain::CapabilityName(m.capability)}, {"reason", m.reason}});
      }
      PrintJson({{"error", {{"code", code}, {"message", message}, {"missing", missing}}}});
    } else {
      PrintError(kName, message);
    }
    return kExitCordonFailed;
  }
  const run::RunResult& r = ran->result;
  if (a.json) {
    nlohmann::json out = run::ToJson(r);
    if (ran->cancel_signal != 0) {
      out["cancelled_by"] = sys::SignalName(ran->cancel_signal);
    }
    PrintJson(out);
  } else {
    if (!a.quiet) {
      for (const auto& d : r.grant.degraded) {
        PrintError(kName, "degraded: " + std::string(contain::CapabilityName(d.capability)) + ": " +
                              d.reason);
      }
    }
    Explain(r, spec, ran->cancel_signal);
  }
  if (ran->cancel_signal != 0 && r.release.dead) return 128 + ran->cancel_signal;
  return run::ExitStatus(r);
}

}  // namespace

Command AddRunCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run one command in a contained process tree: exact environment, limits, a deadline, "
      "capped output, and a teardown that kills every descendant and reports death only once "
      "it is verified.");
  cmd->footer(
      "Usage: cordon run [OPTIONS] -- PROG [ARGS...]\n       cordon run [OPTIONS] --shell 'CMD'\n"
      "Durations are seconds (0.5, 2) or take a unit (250ms, 1m); sizes take binary suffixes "
      "(16K, 256M, 1G; K = 1024).\n"
      "Exit status: the command's own; 128+N when it was killed by signal N, or when signal N "
      "to cordon cancelled the run; 124 on timeout; 125 when cordon refused or failed; "
      "126/127 when the program could not be executed / was not found.");
  RunArgs& a = *args;
  auto opt = [&](const std::string& name, std::string& target, const std::string& help) {
    a.options[name] = cmd->add_option(name, target, help);
    return a.options[name];
  };
  opt("--shell", a.shell, "Run CMD with /bin/sh -c instead of PROG ARGS")->type_name("CMD");
  opt("--workspace", a.workspace,
      "The command's working directory, shown read-write at /workspace with isolation "
      "(default: the current one)")
      ->type_name("DIR");
  a.options["--env"] =
      cmd->add_option("--env", a.env,
                      "Set NAME=VALUE in the command's environment (repeatable). Nothing else "
                      "is inherited: not even PATH or HOME")
          ->type_name("NAME=VALUE")
          ->allow_extra_args(false);
  opt("--stdin", a.stdin_source,
      "The command's stdin: FILE, or - for cordon's own (a terminal is read to its end first, "
      "at most 1 GiB); default: /dev/null")
      ->type_name("FILE|-");
  opt("--timeout", a.timeout,
      "Wall-clock deadline, in seconds (0.5, 2, 250ms, 1m); "
      "default: none")
      ->type_name("SEC");
  opt("--grace", a.grace, "Time between SIGTERM and SIGKILL at the deadline; default 2")
      ->type_name("SEC");
  opt("--output-limit", a.output_limit,
      "Bytes of stdout and of stderr kept, each; the rest is read and discarded; default 10M")
      ->type_name("BYTES");
  opt("--memory", a.memory, "Memory limit (cgroup), e.g. 256M")->type_name("BYTES");
  opt("--pids", a.pids, "At most N processes and threads")->type_name("N");
  opt("--cpu-seconds", a.cpu_seconds, "CPU time limit per process (RLIMIT_CPU)")->type_name("N");
  opt("--file-size", a.file_size, "Largest file the command may write (RLIMIT_FSIZE)")
      ->type_name("BYTES");
  opt("--open-files", a.open_files, "At most N open files per process (RLIMIT_NOFILE)")
      ->type_name("N");
  opt("--address-space", a.address_space, "Virtual memory limit per process (RLIMIT_AS)")
      ->type_name("BYTES");
  opt("--cpus", a.cpus,
      "At most N CPUs of time for the whole tree, e.g. 0.5 (a cgroup CPU quota per 100 ms)")
      ->type_name("N");
  a.options["--require"] =
      cmd->add_option("--require", a.require,
                      "Refuse to run unless these capabilities are enforced (comma-separated; "
                      "see cordon probe)")
          ->type_name("CAP[,CAP]")
          ->allow_extra_args(false);
  a.options["--permissive"] = cmd->add_flag(
      "--permissive", a.permissive,
      "Run with an explicit limit this host cannot enforce, reported as degraded, instead of "
      "refusing");
  opt("--isolation", a.isolation,
      "none: limits and teardown only; standard (default): user, mount, pid, network, IPC and "
      "UTS namespaces, a built filesystem view, seccomp (sockets: Unix, IP and route netlink "
      "only; no raw, packet or ping sockets), Landlock, no privileges; strict: standard and no "
      "netlink, no raw socket of any family")
      ->type_name("LEVEL");
  opt("--network", a.network,
      "none (default): only a private loopback; host: share the host's network (loud: it is "
      "reported as a warning)")
      ->type_name("none|host");
  a.options["--ro-bind"] =
      cmd->add_option("--ro-bind", a.ro_binds,
                      "Show host path SRC read-only at DST inside (default: the same path); "
                      "repeatable")
          ->type_name("SRC[:DST]")
          ->allow_extra_args(false);
  a.options["--bind"] =
      cmd->add_option("--bind", a.binds, "Show host path SRC read-write at DST inside; repeatable")
          ->type_name("SRC[:DST]")
          ->allow_extra_args(false);
  opt("--tmp-size", a.tmp_size, "Size of the private /tmp (and /dev/shm); default 256M")
      ->type_name("BYTES");
  opt("--policy", a.policy,
      "A TOML policy file with the same settings (isolation, network, ro_binds, binds, "
      "tmp_size_bytes, uid_range, seccomp.deny, limits as timeout_ms, memory_bytes, ...); "
      "options given here override it")
      ->type_name("FILE");
  opt("--owner", a.owner, "Who the grant is recorded for (default: the user name)")
      ->type_name("NAME");
  opt("--state-dir", a.state_dir,
      "Where the store lives (default: $CORDON_STATE_DIR, /var/lib/cordon as root, "
      "$XDG_STATE_HOME/cordon otherwise)")
      ->type_name("DIR");
  opt("--cgroup-root", a.cgroup_root,
      "Create cordon's cgroups under this cgroup path in every hierarchy, instead of beneath "
      "cordon's own group")
      ->type_name("PATH");
  opt("--closure", a.closure,
      "Run PROG from this pinned closure: the directory is verified against its manifest "
      "(DIR/.cordon/manifest.json) and --pin, and PROG, a file of it (a path within DIR, or a "
      "link that resolves to one), runs from its verified descriptor")
      ->type_name("DIR");
  opt("--pin", a.pin, "The closure's pin (cordon closure pin MANIFEST)")->type_name("HEX");
  a.options["--json"] =
      cmd->add_flag("--json", a.json, "Print one JSON result object instead of the output");
  a.options["--quiet"] =
      cmd->add_flag("--quiet,-q", a.quiet, "Do not print degraded capabilities on stderr");
  // The command comes after "--", so a mistyped option of cordon's is an
  // error, not the start of the command. Everything from the program on
  // is the command's, even without "--" (`cordon run /bin/echo --json`
  // echoes --json).
  cmd->add_option("command", a.command, "The program and its arguments, after --")
      ->type_name("PROG ARGS...");
  cmd->positionals_at_end();
  return Command{cmd, [args] {
                   RunArgs& a = *args;
                   return Execute(a);
                 }};
}

}  // namespace cordon::cli
