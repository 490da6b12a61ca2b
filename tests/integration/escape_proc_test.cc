// The escape suite, issue 13's /proc, descriptor, cgroup and core-dump
// classes (cases 1, 2, 3, 4, 5, 11 and 13). As in escape_test.cc, every
// case runs for the three callers and is judged from outside: the host
// binary's digest, the descriptors the command holds as the host sees
// them, the host's sysctl values, the limits in the host's cgroup files
// and /proc/PID/limits, and which marked processes are alive. What the
// attacker prints is only read for what it must not contain (a canary, a
// secret) and for the errno of a call whose refusal is all there is to
// see.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "closure/sha256.h"
#include "contain/cgroup_layout.h"
#include "daemon_process.h"
#include "escape_support.h"

namespace cordon::testing {
namespace {

class ProcEscapeTest : public EscapeTest {
 protected:
  // The arguments Sandboxed() gives `cordon run`, with `options` and the
  // state directory `state` (default: the fixture's), and the helpers
  // bound in (under `none`, which takes no binds, they are the host's).
  std::vector<std::string> RunArgs(const std::string& script, std::vector<std::string> options,
                                   const std::string& state = "") const {
    if (std::find(options.begin(), options.end(), "none") == options.end()) {
      options.insert(options.begin(), {"--ro-bind", CORDON_HELPERS_DIR});
    }
    return EscapeTest::RunArgs(script, options, state);
  }

  // `cordon run` of `script`, not waited for: the test looks at the run
  // from outside while it is alive.
  std::unique_ptr<Cordon> Start(const std::string& script, std::vector<std::string> options) {
    return std::make_unique<Cordon>(RunArgs(script, std::move(options)), "", Prefix());
  }

  // A FIFO in the workspace that the command opens for reading (and so
  // waits on); the test opens it for writing once the command is there.
  std::string MakeFifo() {
    std::string name = "go-" + Token();
    EXPECT_EQ(::mkfifo((work_ / name).c_str(), 0666), 0) << std::strerror(errno);
    ::chmod((work_ / name).c_str(), 0666);
    return name;
  }

  // The FIFO's writing end, once a reader has it open (bounded: the
  // reader is another process, so its arrival is polled); -1 if none came.
  static int OpenFifoWriter(const std::string& path, const Cordon& c) {
    for (int i = 0; i < 15000; ++i) {
      int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) return fd;
      if (errno != ENXIO || Exited(c.pid())) return -1;
      ::usleep(2000);
    }
    return -1;
  }

  // The host pid of the process whose command line starts with `program`
  // and contains `marker` (the supervisor's, which holds the script text,
  // does not start with it); -1 if there is not exactly one.
  static pid_t HostPidOf(const std::string& program, const std::string& marker) {
    pid_t found = -1;
    int count = 0;
    for (pid_t pid : LiveProcessesWith(marker)) {
      if (Slurp("/proc/" + std::to_string(pid) + "/cmdline").starts_with(program)) {
        found = pid;
        ++count;
      }
    }
    return count == 1 ? found : -1;
  }

  // fd number -> target, as the host sees /proc/PID/fd.
  static std::map<int, std::string> HostFds(pid_t pid) {
    std::map<int, std::string> fds;
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      std::string target = std::filesystem::read_symlink(e.path(), ec).string();
      fds[std::atoi(e.path().filename().c_str())] = target;
    }
    return fds;
  }

  // "Max processes" and the like from /proc/PID/limits: "soft hard".
  static std::string HostLimit(pid_t pid, const std::string& name) {
    std::istringstream in(Slurp("/proc/" + std::to_string(pid) + "/limits"));
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with(name)) continue;
      std::istringstream fields(line.substr(name.size()));
      std::string soft, hard;
      fields >> soft >> hard;
      return soft + " " + hard;
    }
    return "";
  }

  // The errno the probe printed for `call` ("CALL ERRNO" lines), -1 if
  // it printed none.
  static int Errno(const json& result, const std::string& call) {
    std::istringstream in(result.value("stdout", ""));
    for (std::string line; std::getline(in, line);) {
      if (line.size() > call.size() && line.starts_with(call) && line[call.size()] == ' ' &&
          line.find(' ', call.size() + 1) == std::string::npos) {
        return std::atoi(line.c_str() + call.size() + 1);
      }
    }
    return -1;
  }

  static std::string Digest(const std::string& path) {
    auto d = closure::Sha256Hex(Slurp(path));
    return d ? *d : "";
  }

  std::string Probe() const { return Helper("try-syscall"); }
};

// Case 1: the host's binaries cannot be written through /proc's magic
// links (runc CVE-2019-5736). The targets are /proc/self/exe (the probe,
// bound read-only from the host), /proc/1/exe (with a pid namespace the
// init, a copy of the supervisor: the host's build/cordon) and the
// parent's exe (the supervisor itself without one). Each is opened for
// writing directly and reopened through /proc/self/fd/N of an O_PATH
// descriptor, and a setsid'ed, double-forked child keeps retrying the
// reopen for 1 s while the command exits and the init goes away. The
// write is an append of a token, harmless to an ELF file, so a success
// shows as a changed digest. (Not under `none`: there a root caller's
// command is the host's root with every capability, and could write the
// binary by its path; that level promises limits and teardown only.)
TEST_P(ProcEscapeTest, TheHostBinaryCannotBeRewrittenThroughProcExe) {
  const std::string shell = std::filesystem::canonical("/bin/sh").string();
  // (The daemon is build/cordon too, `cordon serve`; cordon-serve beside
  // it is the daemon alone.)
  std::vector<std::string> binaries = {CORDON_BINARY, Probe(), shell};
  std::string serve = std::filesystem::path(CORDON_BINARY).parent_path() / "cordon-serve";
  if (std::filesystem::exists(serve)) binaries.push_back(serve);
  std::map<std::string, std::string> before;
  for (const auto& b : binaries) before[b] = Digest(b);
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    std::string token = "cordon-escape-" + Token();
    Ran r = Cordon(RunArgs("exec " + Probe() + " exe-race:" + token + " exe-write:" + token,
                           {"--isolation", level}),
                   "", Prefix())
                .Wait();
    json j = Result(r);
    for (const char* target : {"/proc/self/exe", "/proc/1/exe"}) {
      int err = Errno(j, std::string("exe-write ") + target);
      EXPECT_NE(err, 0) << target << ": " << j["stdout"];
      EXPECT_NE(err, -1) << "the probe did not run: " << r.out << r.err;
    }
    // The racer is bounded (1 s); where the tree is held it died with the
    // run; on a restricted host it may outlive it, as process_tree says.
    for (int i = 0; i < 1000 && !LiveProcessesWith("exe-race:" + token).empty(); ++i) {
      ::usleep(10000);
    }
    EXPECT_TRUE(LiveProcessesWith("exe-race:" + token).empty()) << "the racer did not end";
    if (Enforced(j, "process_tree")) {
      EXPECT_EQ(j["release"]["survivors"].size(), 0u) << r.out;
    }
  }
  for (const auto& b : binaries) {
    EXPECT_EQ(Digest(b), before[b]) << b << " was changed from inside a sandbox";
  }
}

// Case 2: the descriptors the command starts with, as the host sees them
// while it runs: stdin (/dev/null), and the stdout and stderr pipes whose
// other ends the supervisor holds; nothing else (no host directory,
// cgroup file, pidfd, store or closure descriptor: this run pins no
// closure). Inside, openat(fd, "..") and fchdir on each lead nowhere,
// climbing ".." from the working directory stays in the sandbox's view
// (the host's /tmp, where the secret is, is not what it finds), and
// getcwd is never "(unreachable)" (CVE-2024-21626). Under `none` the
// descriptors are still only those (nothing of the supervisor's leaks to
// any command), while the filesystem is the host's by design.
TEST_P(ProcEscapeTest, TheCommandStartsWithOnlyItsOwnDescriptors) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  const std::string host_dir = std::filesystem::path(host_.path()).filename();
  const std::string climb = "tmp/" + host_dir + "/secret.txt";
  for (const char* level : {"standard", "strict", "none"}) {
    SCOPED_TRACE(level);
    const bool none = std::string(level) == "none";
    std::string fifo = MakeFifo();
    auto c =
        Start("exec " + Probe() + " wait-fifo:" + fifo + " fds cwd climb:" + climb + " fd-climb",
              {"--isolation", level});
    int writer = OpenFifoWriter(work_ / fifo, *c);
    ASSERT_GE(writer, 0) << "the command never opened its FIFO: " << c->Wait().out;
    pid_t pid = HostPidOf(Probe(), "wait-fifo:" + fifo);
    std::map<int, std::string> fds = pid > 0 ? HostFds(pid) : std::map<int, std::string>{};
    std::map<int, std::string> supervisor = HostFds(c->pid());
    ::close(writer);
    Ran r = c->Wait();
    json j = Result(r);
    ASSERT_GT(pid, 0) << "the command was not found on the host: " << r.out << r.err;
    // 0, 1, 2 and (if its open has returned) the FIFO the command opened
    // itself, nothing more.
    ASSERT_TRUE(fds.size() == 3 || fds.size() == 4) << ::testing::PrintToString(fds);
    EXPECT_EQ(fds[0], "/dev/null");
    std::set<std::string> held;
    for (const auto& [fd, target] : supervisor) held.insert(target);
    for (int fd : {1, 2}) {
      EXPECT_TRUE(fds[fd].starts_with("pipe:")) << fd << " -> " << fds[fd];
      EXPECT_TRUE(held.contains(fds[fd])) << fds[fd] << " is not one of the supervisor's pipes";
    }
    if (fds.size() == 4) {
      EXPECT_TRUE(fds[3].ends_with("/" + fifo)) << "fd 3 -> " << fds[3];
    }
    std::string out = j["stdout"];
    // The probe's own listing, after it closed the FIFO: stdio alone.
    EXPECT_NE(out.find("fd 0 "), std::string::npos) << out;
    EXPECT_EQ(out.find("fd 3 "), std::string::npos) << out;
    EXPECT_EQ(out.find("(unreachable)"), std::string::npos) << out;
    EXPECT_EQ(Errno(j, "cwd"), 0) << out;
    EXPECT_NE(Errno(j, "fd-climb"), 0) << "a descriptor led somewhere: " << out;
    EXPECT_EQ(out.find("fd-climb-hit"), std::string::npos) << out;
    if (none) continue;
    EXPECT_EQ((r.out + r.err).find(secret_), std::string::npos) << out;
    EXPECT_NE(Errno(j, "climb:" + climb), 0) << out;
    // Where the climb ended holds nothing of the host's /tmp.
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("climb-ls ")) {
        EXPECT_EQ(line.find(host_dir), std::string::npos) << line;
      }
    }
    if (Namespaced(j)) {
      EXPECT_NE(out.find("cwd /workspace\n"), std::string::npos) << out;
      EXPECT_NE(out.find("climb-cwd /\n"), std::string::npos) << out;
    }
  }
}

// How many runs case 3 makes: `fallback`, or CORDON_PROC1_RUNS (the
// issue's 1000) where a longer test is welcome.
int Runs(int fallback) {
  const char* env = std::getenv("CORDON_PROC1_RUNS");
  return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : fallback;
}

// Case 3: from the command's first instruction until its init has
// settled, /proc/1/{mem,environ,fd/*} and process_vm_readv of pid 1 are
// refused, run after run (CVE-2016-9962). The init makes itself
// undumpable before it forks the command (pid_init.cc): this is the guard
// against that order changing back. The init is a copy of the supervisor,
// so a canary in the supervisor's environment is what a read of
// /proc/1/environ would show; /proc/1/cmdline, which anyone may read,
// must already be the init's own title (launch.cc renames the init before
// it forks the command: a read from the first instruction found the
// supervisor's command line when it did so after). The probe is the
// command itself (no shell before it). Root's runs go through one daemon, one at a time, half of
// them under each level; the other callers cannot start that daemon
// (DaemonProcess runs it as the test's user) and make theirs with `cordon
// run`: the window is the same code either way. The issue asks for 1000
// runs; a run costs 25 to 60 ms on this project's 2-core CI machines
// (three times that under ASan), so by default root makes 300 and the
// others 40 each, and CORDON_PROC1_RUNS=1000 makes the issue's count.
// Two clients at once: they once made the daemon report 2 or 3 runs in
// 750 as timed_out after 20-70 ms of a 30 s deadline (Asio handed a
// released descriptor's pending events to the next one watched, and the
// deadline took any wake-up for its own; asio_reactor.cc, execution.cc),
// so every run here must also have exited, not timed out.
TEST_P(ProcEscapeTest, PidOneCannotBeReadFromTheCommandsFirstInstruction) {
  const std::string canary = "cordon-proc1-" + Token();
  auto judge = [&](const json& result, const std::string& where) {
    std::string out = result.value("stdout", "");
    for (const char* kind : {"mem", "environ", "fd", "vm_readv"}) {
      int err = Errno(result, std::string("proc1-") + kind);
      if (err == 0 || err == -1) {
        ADD_FAILURE() << where << ": proc1-" << kind << " " << err << ": " << result.dump();
        return false;
      }
    }
    if (out.find("data ") != std::string::npos || result.dump().find(canary) != std::string::npos) {
      ADD_FAILURE() << where << ": read pid 1: " << out;
      return false;
    }
    return true;
  };
  if (GetParam() == Caller::kRoot) {
    TempDir workspace;  // the daemon binds no host path but the workspace
    // (Where the kernel cannot idmap it, the sandbox enters it as an
    // outside uid of its own.)
    if (!KernelIdmaps(workspace.path())) ::chmod(workspace.path().c_str(), 0755);
    std::filesystem::copy_file(Probe(), workspace / "try-syscall");
    // (Without namespaces the workspace keeps its host path, and pid 1 is
    // the host's init: the sandbox's uid must not read it either.)
    const std::string probe =
        SandboxNamespaces() ? "/workspace/try-syscall" : workspace / "try-syscall";
    ::chmod((workspace / "try-syscall").c_str(), 0755);
    ::setenv("CORDON_TEST_PROC1_CANARY", canary.c_str(), 1);
    DaemonProcess daemon;
    ::unsetenv("CORDON_TEST_PROC1_CANARY");
    ASSERT_TRUE(daemon.ready()) << daemon.Log();
    const int kRuns = Runs(300), kThreads = 2;
    std::atomic<int> done{0}, failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        HttpClient client = daemon.Client();
        for (int i = t; i < kRuns && failed < 3; i += kThreads) {
          const char* level = kFilteredLevels[i % 2];
          HttpResponse r = client.Post("/v1/runs", {{"argv", json::array({probe, "proc1-window"})},
                                                    {"workspace", workspace.path()},
                                                    {"isolation", level},
                                                    {"limits", {{"timeout_ms", 30000}}}});
          json j = json::parse(r.body, nullptr, false);
          if (r.status != 200 || j.is_discarded() || j["outcome"] != "exited") {
            ADD_FAILURE() << level << " run " << i << ": " << r.status << " " << r.body;
            ++failed;
            continue;
          }
          if (!judge(j, std::string(level) + " run " + std::to_string(i))) ++failed;
          ++done;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(done, kRuns);
    return;
  }
  ::setenv("CORDON_TEST_PROC1_CANARY", canary.c_str(), 1);
  const int kRuns = Runs(40);
  for (int i = 0; i < kRuns; ++i) {
    const char* level = kFilteredLevels[i % 2];
    Ran r =
        Cordon(RunArgs("exec " + Probe() + " proc1-window", {"--isolation", level}), "", Prefix())
            .Wait();
    json j = Result(r);
    if (!judge(j, std::string(level) + " run " + std::to_string(i))) break;
  }
  ::unsetenv("CORDON_TEST_PROC1_CANARY");
}

// Everything a sandbox can read of every process's environment and
// command line.
constexpr const char* kReadAllProc =
    "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; "
    "cat /proc/1/environ /proc/1/cmdline /proc/$PPID/environ /proc/$PPID/cmdline; true";

// Case 4: canaries in the supervisor's environment and command line
// (`cordon run`: its --owner and its state directory's path) and in the
// daemon's (an environment variable, a --kernel-env argument, the state
// directory's path) never show in /proc/*/environ or /proc/*/cmdline
// inside a run or a session. The daemon is started by the test, as root:
// only the root caller runs that half. On a restricted host there is no
// pid namespace: the supervisor is a host process there, whose command
// line /proc shows to anyone, and process_view says so (degraded); its
// environment stays unreadable (Landlock refuses ptrace access to a
// process outside the sandbox's domain). (Not under `none`: the command
// there is the caller, who may read its own supervisor.)
TEST_P(ProcEscapeTest, CanariesOfTheSupervisorAndDaemonNeverShowInside) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  const std::string env_canary = "cordon-env-" + Token();
  const std::string owner_canary = "cordonowner" + Token();
  const std::string dir_canary = "cordon-dir-" + Token();
  std::string state = state_ / dir_canary;
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    std::vector<std::string> options = {"--isolation", level, "--owner", owner_canary};
    ::setenv("CORDON_TEST_SUPERVISOR_CANARY", env_canary.c_str(), 1);
    Ran r = Cordon(RunArgs(kReadAllProc, options, state), "", Prefix()).Wait();
    ::unsetenv("CORDON_TEST_SUPERVISOR_CANARY");
    json j = Result(r);
    // (The result itself names the owner, in its grant: only what the
    // command printed is looked at.)
    std::string seen = j.value("stdout", "") + j.value("stderr", "");
    EXPECT_NE(seen.find("/bin/sh"), std::string::npos) << "nothing was read: " << r.out << r.err;
    EXPECT_EQ(seen.find(env_canary), std::string::npos) << j["stdout"];
    if (Enforced(j, "process_view")) {
      EXPECT_EQ(seen.find(owner_canary), std::string::npos) << seen;
      EXPECT_EQ(seen.find(dir_canary), std::string::npos) << seen;
    }
  }
  if (GetParam() != Caller::kRoot) return;
  const std::string daemon_env = "cordon-denv-" + Token();
  const std::string daemon_arg = "CORDON_ARG_" + Token();
  const std::string daemon_dir = "cordon-ddir-" + Token();
  TempDir daemon_state;
  ::setenv("CORDON_TEST_DAEMON_CANARY", daemon_env.c_str(), 1);
  DaemonProcess daemon({"--kernel-env", daemon_arg}, daemon_state / daemon_dir);
  ::unsetenv("CORDON_TEST_DAEMON_CANARY");
  ASSERT_TRUE(daemon.ready()) << daemon.Log();
  // The control: the canaries are where the sandbox would find them.
  std::string daemon_proc = Slurp("/proc/" + std::to_string(daemon.pid()) + "/environ") +
                            Slurp("/proc/" + std::to_string(daemon.pid()) + "/cmdline");
  for (const auto& canary : {daemon_env, daemon_arg, daemon_dir}) {
    EXPECT_NE(daemon_proc.find(canary), std::string::npos) << canary;
  }
  HttpClient client = daemon.Client();
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    HttpResponse run = client.Post("/v1/runs", {{"shell", kReadAllProc}, {"isolation", level}});
    ASSERT_EQ(run.status, 200) << run.body;
    std::string id = std::string("proc-canary-") + level;
    HttpResponse created =
        client.Post("/v1/sessions", {{"id", id}, {"kind", "shell"}, {"isolation", level}});
    ASSERT_EQ(created.status, 201) << created.body;
    HttpResponse exec = client.Post("/v1/sessions/" + id + "/exec", {{"command", kReadAllProc}});
    EXPECT_EQ(exec.status, 200) << exec.body;
    // From the host, while the session lives: its init, a copy of the
    // daemon, kept no copy of the daemon's environment either (launch.cc
    // clears it), so not even a read that got past its undumpability
    // would find one.
    int inits = 0;
    for (pid_t pid : LiveProcessesWith("cordon-init")) {
      std::string env = Slurp("/proc/" + std::to_string(pid) + "/environ");
      if (Slurp("/proc/" + std::to_string(pid) + "/cmdline").starts_with("cordon-init")) ++inits;
      EXPECT_EQ(env.find(daemon_env), std::string::npos) << "in the init's environ, pid " << pid;
    }
    // (Without namespaces there is no init, and host processes show, the
    // daemon among them: process_view is degraded, and says so.)
    const bool own_view = SandboxNamespaces();
    const bool view = Enforced(json::parse(run.body, nullptr, false), "process_view");
    if (own_view) {
      EXPECT_GE(inits, 1) << "the session's init was not found";
    }
    client.Request("DELETE", "/v1/sessions/" + id);
    // (Only what the command printed: the result's own notes, for the
    // daemon's client, may name the scratch workspace under the state
    // directory, as where a kernel cannot idmap it.)
    for (const HttpResponse* r : {&run, &exec}) {
      json j = json::parse(r->body, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << r->body;
      const std::string seen = j.value("stdout", "") + j.value("stderr", "");
      EXPECT_NE(seen.find(own_view ? "cordon-init" : " serve "), std::string::npos)
          << "nothing was read: " << r->body;
      EXPECT_EQ(seen.find(daemon_env), std::string::npos) << daemon_env << " in " << r->body;
      if (view) {
        for (const auto& canary : {daemon_arg, daemon_dir}) {
          EXPECT_EQ(seen.find(canary), std::string::npos) << canary << " in " << r->body;
        }
      }
    }
  }
}

// The escapee of case 5: it moves itself to every parent group it can
// name and raises its group's limits, in every hierarchy it can see, then
// waits as a marked `sleep`.
constexpr const char* kCgroupEscape = R"(escape() {
  while IFS=: read -r _ ctrl path; do
    for m in /sys/fs/cgroup/$ctrl /sys/fs/cgroup/unified /sys/fs/cgroup; do
      for f in memory.max memory.limit_in_bytes memory.memsw.limit_in_bytes pids.max; do
        echo max > "$m$path/$f"; echo -1 > "$m$path/$f"
      done
      echo $$ > "$m${path%/*}/cgroup.procs"; echo $$ > "$m${path%/*}/tasks"
      echo $$ > "$m/cgroup.procs"; echo $$ > "$m/tasks"
    done
  done < /proc/self/cgroup
}
case $1 in
  child) escape 2>/dev/null; : > child-tried; exec sleep "$2" ;;
esac
escape 2>/dev/null
"$2" unshare-cgroup mount-cgroup1 mount-cgroup2 raise-nproc
if [ "$4" = tree ]; then
  (setsid sh escape.sh child "300.${3}7" < /dev/null > /dev/null 2>&1 &)
  i=0; while [ ! -e child-tried ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
fi
exec "$2" "wait-fifo:$5"
)";

// Case 5: the cgroup (CVE-2022-0492). The command and a setsid'ed
// escapee write their pids to the parents' cgroup.procs and raise their
// own memory and pids limits in every hierarchy they can name; the
// command mounts cgroup v1 (to write its release_agent) and v2, unshares
// a cgroup namespace, and raises RLIMIT_NPROC. While they wait, the test
// reads from the host: the escapee is still in the run's own group, whose
// limits are still the ones asked for (root: the cgroup files; the other
// callers, who get no cgroup here: RLIMIT_NPROC in /proc/PID/limits);
// after the run no marked process is alive. Without a held tree (a
// restricted host, `none` for nobody) a setsid'ed escapee would outlive
// the run by design (process_tree says degraded), so none is started.
// Under `none` as root the command is the host's root and could write any
// cgroup file: that level is tested for the other callers only, whose
// writes the host's permissions refuse.
TEST_P(ProcEscapeTest, TheCgroupCannotBeLeftOrItsLimitsRaised) {
  std::ofstream(work_ / "escape.sh") << kCgroupEscape;
  const bool root = GetParam() == Caller::kRoot;
  const bool memory = root && TestProbe().Status(contain::Capability::kMemory).enforceable;
  const bool tree = TreeHeld();
  auto layout = contain::DiscoverCgroupLayout();
  ASSERT_TRUE(layout.has_value());
  std::vector<const char*> levels = {"standard", "strict"};
  if (!root) levels.push_back("none");
  for (const char* level : levels) {
    SCOPED_TRACE(level);
    ::unlink((work_ / "child-tried").c_str());
    const std::string n = std::to_string(::getpid()) + std::to_string(std::rand() % 1000);
    const std::string marker = "300." + n + "7";
    const bool held = tree && std::string(level) != "none";
    std::string fifo = MakeFifo();
    std::vector<std::string> options = {"--isolation", level, "--pids", "32"};
    if (memory) {
      options.push_back("--memory");
      options.push_back("64M");
    }
    auto c =
        Start("sh escape.sh main " + Probe() + " " + n + " " + (held ? "tree" : "no") + " " + fifo,
              options);
    int writer = OpenFifoWriter(work_ / fifo, *c);
    ASSERT_GE(writer, 0) << "the command never opened its FIFO: " << c->Wait().out;
    pid_t command = HostPidOf(Probe(), "wait-fifo:" + fifo);
    // The escapee writes child-tried just before it execs sleep: for a
    // moment, while it is between the two images, its command line reads
    // empty (seen once on a loaded 2-core machine). Bounded.
    std::vector<pid_t> marked = LiveProcessesWith(marker);
    for (int i = 0; held && marked.empty() && i < 500; ++i) {
      ::usleep(10000);
      marked = LiveProcessesWith(marker);
    }
    std::vector<pid_t> watched = marked;
    if (command > 0) watched.push_back(command);
    std::map<pid_t, std::string> cgroups, nproc;
    std::map<std::string, std::string> limits;  // file -> value, read while it runs
    for (pid_t pid : watched) {
      cgroups[pid] = Slurp("/proc/" + std::to_string(pid) + "/cgroup");
      nproc[pid] = HostLimit(pid, "Max processes");
    }
    if (root && command > 0) {
      // The run's own group in each hierarchy, where the command is.
      std::istringstream lines(cgroups[command]);
      for (std::string line; std::getline(lines, line);) {
        std::string ctrl = line.substr(line.find(':') + 1);
        std::string path = ctrl.substr(ctrl.find(':') + 1);
        ctrl = ctrl.substr(0, ctrl.find(':'));
        if (ctrl == "memory" && layout->v1.contains("memory")) {
          limits["memory.limit_in_bytes"] =
              Slurp(layout->v1.at("memory").mount_point + path + "/memory.limit_in_bytes");
        } else if (ctrl == "pids" && layout->v1.contains("pids")) {
          limits["pids.max"] = Slurp(layout->v1.at("pids").mount_point + path + "/pids.max");
        } else if (ctrl.empty() && layout->v2) {
          for (const char* f : {"memory.max", "pids.max"}) {
            std::string v = Slurp(layout->v2->mount_point + path + "/" + f);
            if (!v.empty()) limits[f] = v;
          }
        }
      }
    }
    ::close(writer);
    Ran r = c->Wait();
    json j = Result(r);
    ASSERT_GT(command, 0) << "the command was not found on the host: " << r.out << r.err;
    EXPECT_EQ(marked.size(), held ? 1u : 0u) << r.out << r.err;
    for (const char* call : {"unshare-cgroup", "mount-cgroup1", "mount-cgroup2", "raise-nproc"}) {
      int err = Errno(j, call);
      EXPECT_TRUE(err != 0 && err != -1) << call << ": " << j["stdout"];
    }
    // Each watched process is still in the run's own group (the same as
    // the command's, under this test's cgroup root), with its limits.
    const std::string own = CgroupRoot() + "/" + j["grant"]["id"].get<std::string>() + "\n";
    for (pid_t pid : watched) {
      if (root) {
        if (layout->v1.contains("pids")) {
          EXPECT_NE(cgroups[pid].find("pids:" + own), std::string::npos) << cgroups[pid];
        }
        // (A v2 group of its own where the tree is held by one: on a
        // hybrid host before 5.14, no cgroup.kill, the pid namespace holds
        // it and the v2 tree is not used.)
        if (j["grant"]["mechanisms"].value("process_tree", "") == "cgroup2") {
          EXPECT_NE(cgroups[pid].find("0::" + own), std::string::npos) << cgroups[pid];
        }
        if (memory && layout->v1.contains("memory")) {
          EXPECT_NE(cgroups[pid].find("memory:" + own), std::string::npos) << cgroups[pid];
        }
      } else if (j["grant"]["mechanisms"].value("process_count", "") == "rlimit") {
        EXPECT_EQ(nproc[pid], "32 32") << pid;
      }
    }
    if (root) {
      if (memory) {
        std::string v =
            limits.contains("memory.max") ? limits["memory.max"] : limits["memory.limit_in_bytes"];
        EXPECT_EQ(v, std::to_string(64 << 20) + "\n");
      }
      if (j["grant"]["mechanisms"].value("process_count", "").starts_with("cgroup")) {
        EXPECT_EQ(limits["pids.max"], "32\n");
      }
    }
    EXPECT_TRUE(LiveProcessesWith(marker).empty()) << "an escapee outlived the run";
    EXPECT_EQ(j["release"]["dead"], true);
  }
}

// Case 11: writes to /proc/sys (the host's core_pattern, modprobe, sysrq
// and a plain tunable, and the hostname, which a UTS namespace of its own
// would take), /proc/sysrq-trigger and binfmt_misc (registering through
// /proc/sys/fs/binfmt_misc, and mounting an instance of its own, which
// Linux 6.7+ allows in a user namespace) are refused, and the host's
// values are as they were. A file this kernel lacks (modprobe without
// module support) stays absent. (Not under `none`: a root caller's
// command there is the host's root.)
TEST_P(ProcEscapeTest, KernelTunablesCannotBeWritten) {
  const std::string token = Token();
  long map_count = std::atol(Slurp("/proc/sys/vm/max_map_count").c_str());
  const std::vector<std::pair<std::string, std::string>> writes = {
      {"/proc/sys/kernel/core_pattern", "|/bin/false cordon-" + token},
      {"/proc/sys/kernel/modprobe", "/tmp/cordon-" + token},
      {"/proc/sys/kernel/sysrq", "0"},
      {"/proc/sys/kernel/hostname", "cordon-" + token},
      {"/proc/sys/vm/max_map_count", std::to_string(map_count + 1)},
      {"/proc/sysrq-trigger", "h"},
      {"/proc/sys/fs/binfmt_misc/register",
       ":cordon" + token + ":E::cordon" + token + "::/bin/sh:"},
  };
  std::map<std::string, std::string> host;
  for (const auto& [path, value] : writes) host[path] = Slurp(path);
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    std::string calls;
    for (const auto& [path, value] : writes) calls += " 'writefile:" + path + "=" + value + "'";
    Probed p = TrySyscalls(level, calls.substr(1) + " mount-binfmt");
    for (const auto& [path, value] : writes) {
      std::string call = "writefile:" + path + "=" + value;
      EXPECT_TRUE(p.err.contains(call)) << call << ": " << p.result["stdout"];
      EXPECT_NE(p.err[call], 0) << call << ": " << p.result["stdout"];
      if (path.ends_with("/register")) continue;  // write-only
      EXPECT_EQ(Slurp(path), host[path]) << path << " changed on the host";
    }
    EXPECT_EQ(p.err["mount-binfmt"], EPERM) << p.result["stdout"];
    EXPECT_FALSE(std::filesystem::exists("/proc/sys/fs/binfmt_misc/cordon" + token));
  }
}

// Case 13: core dumps (the CVE-2025-4598 class: a crashing sandboxed
// process's memory handed to the host's core handler). The command's
// RLIMIT_CORE is 0, soft and hard, as the host's /proc/PID/limits shows
// while it waits; raising it fails; and after an abort no core file is
// left where the host's core_pattern would put it (a name relative to the
// crashing process's directory, the workspace; or an absolute directory).
// A core_pattern that pipes to a handler gets the limit as %c, which
// handlers such as systemd-coredump honour by storing nothing; the kernel
// still starts them, which this test cannot see. (Not under `none`:
// it sets no limit; the caller's own apply.)
TEST_P(ProcEscapeTest, AnAbortLeavesNoCoreDump) {
  const std::string pattern = Slurp("/proc/sys/kernel/core_pattern");
  std::filesystem::path core_dir = work_.path();
  if (pattern.starts_with("/")) core_dir = std::filesystem::path(pattern).parent_path();
  auto listing = [&] {
    std::set<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(core_dir, ec)) {
      names.insert(e.path().filename());
    }
    return names;
  };
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    std::string fifo = MakeFifo();
    std::set<std::string> before = listing();
    before.erase(fifo);
    auto c = Start("exec " + Probe() + " wait-fifo:" + fifo + " raise-core abort",
                   {"--isolation", level});
    int writer = OpenFifoWriter(work_ / fifo, *c);
    ASSERT_GE(writer, 0) << "the command never opened its FIFO: " << c->Wait().out;
    pid_t pid = HostPidOf(Probe(), "wait-fifo:" + fifo);
    std::string core = pid > 0 ? HostLimit(pid, "Max core file size") : "";
    ::close(writer);
    Ran r = c->Wait();
    json j = Result(r);
    EXPECT_EQ(core, "0 0") << "the command's RLIMIT_CORE, from the host";
    EXPECT_EQ(j["outcome"], "signaled") << r.out;
    int err = Errno(j, "raise-core");
    EXPECT_TRUE(err != 0 && err != -1) << j["stdout"];
    std::set<std::string> after = listing();
    after.erase(fifo);
    EXPECT_EQ(after, before) << "a core dump appeared in " << core_dir;
    ::unlink((work_ / fifo).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Callers, ProcEscapeTest, kCallers, CallerName);

}  // namespace
}  // namespace cordon::testing
