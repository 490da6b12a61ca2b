// Issue 13, the classes that face the host from inside: the terminal the
// caller started cordon from (case 6), the host's listeners (19) and Unix
// sockets (20), its processes (21), its resources (27), and option-shaped
// program names (29). Each attempt is made from inside a real sandbox and
// judged from outside: what the pty master received, what the listeners
// accepted, whether the test's own canary processes live, whether the test
// process can still fork and write, what a planted program recorded.
//
// The cases run for the three callers of escape_support.h, under
// `standard` and `strict`. `--isolation none` shares the host's network,
// processes and files by design (it promises limits and verified teardown
// only); where a case's promise is only that boundary, it runs under `none`
// too, and a comment says what is and is not promised there.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "escape_support.h"
#include "http_client.h"

namespace cordon::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class HostEscapeTest : public EscapeTest {
 protected:
  // The arguments of `cordon run` as Sandboxed() builds them, without the
  // command: for the cases that start cordon themselves (on a pty, in the
  // background) or give it PROG ARGS instead of --shell.
  std::vector<std::string> RunArgs(const std::vector<std::string>& options) {
    std::vector<std::string> args = {"run",    "--state-dir", state_ / "s",
                                     "--json", "--workspace", work_.path()};
    if (std::find(options.begin(), options.end(), "--timeout") == options.end()) {
      args.insert(args.end(), {"--timeout", "60"});
    }
    if (GetParam() == Caller::kRoot) args.insert(args.end(), {"--cgroup-root", CgroupRoot()});
    args.insert(args.end(), options.begin(), options.end());
    return args;
  }

  // The whole command line of a `cordon run` as the caller runs it.
  std::vector<std::string> CommandLine(const std::vector<std::string>& args) {
    std::vector<std::string> argv = Prefix();
    argv.push_back(CORDON_BINARY);
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // The probe's "NAME ERRNO" lines, as TrySyscalls parses them.
  static std::map<std::string, long> Lines(const json& j) {
    std::map<std::string, long> m;
    std::istringstream lines(j.value("stdout", ""));
    for (std::string line; std::getline(lines, line);) {
      size_t space = line.rfind(' ');
      if (space != std::string::npos)
        m[line.substr(0, space)] = std::atol(line.c_str() + space + 1);
    }
    return m;
  }
};

// A descriptor the test owns, closed on scope exit.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Whether a process the test started (its pidfd) still runs: neither
// readable (ended) nor reapable.
bool AliveByPidfd(int pidfd, pid_t pid) {
  struct pollfd p = {pidfd, POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) return false;
  return ::waitpid(pid, nullptr, WNOHANG) == 0;
}

// Everything readable on `fd` until it has been quiet for `quiet`.
std::string Drain(int fd, milliseconds quiet) {
  std::string got;
  char buf[4096];
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(quiet.count())) <= 0) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// How many connections a listener has waiting (accepted and closed here).
// Asked after the run has ended: a loopback or Unix connect that got
// through is in the accept queue by the time connect() returns, so the
// short poll only guards against a slow wakeup.
int Accepted(int listener) {
  int n = 0;
  for (;;) {
    struct pollfd p = {listener, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) return n;
    int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return n;
    ::close(c);
    ++n;
  }
}

// A listening stream socket on `addr`; its port through `port`.
int Listen(int family, const sockaddr* addr, socklen_t len) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::bind(fd, addr, len) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int Port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

int ListenUnix(const std::string& name, bool abstract) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + (abstract ? 1 : 0), name.data(), name.size());
  socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 1 : 0));
  return Listen(AF_UNIX, reinterpret_cast<sockaddr*>(&a), len);
}

std::string Probe() { return Helper("try-syscall"); }

// --- Case 6: TIOCSTI, TIOCLINUX and the high-bit TIOCSTI (CVE-2017-5226,
// CVE-2019-10063, CVE-2023-28100) against a pty the test owns. ---
//
// cordon runs with the slave as its stdin, stdout and stderr, as from a
// terminal: once as the slave's session (its controlling terminal), and
// once with the slave no one's controlling terminal, so that a process
// that reaches it could take it with TIOCSCTTY and the kernel alone would
// let its TIOCSTI through. Inside, the probe (try-syscall "tty-inject")
// opens every terminal it can name (/dev/tty, /dev/console, /dev/pts/*,
// and the terminals of every process it sees, /proc/PID/fd/0-2), pushes
// its canary into each (TIOCSTI per byte, TIOCSTI with high bits,
// TIOCLINUX paste), takes each as its controlling terminal from a new
// session and pushes again, then does the same on a pty of its own. From
// outside: nothing was queued as input on the slave (TIOCINQ is 0, a read
// finds nothing), and the canary never reached the master, which echoes
// what is pushed. (cordon itself never gives the command its terminal: its
// stdin is /dev/null or bytes cordon read, its output goes through pipes.)
TEST_P(HostEscapeTest, NothingReachesAPtyTheTestOwns) {
  for (const char* level : kFilteredLevels) {
    for (bool controlling : {true, false}) {
      SCOPED_TRACE(std::string(level) + (controlling ? ", controlling tty" : ", no ctty"));
      Fd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
      ASSERT_GE(master.fd, 0) << std::strerror(errno);
      ASSERT_EQ(::grantpt(master.fd), 0);
      ASSERT_EQ(::unlockpt(master.fd), 0);
      std::string name = ::ptsname(master.fd);
      Fd slave(::open(name.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC));
      ASSERT_GE(slave.fd, 0) << name << ": " << std::strerror(errno);
      std::vector<std::string> argv = CommandLine(RunArgs(
          {"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR, "--shell",
           "exec " + Probe() + " tty-inject ioctl-TIOCSTI ioctl-TIOCSTI-high ioctl-TIOCLINUX"}));
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::setsid();
        if (controlling) ::ioctl(slave.fd, TIOCSCTTY, 0);
        for (int fd = 0; fd < 3; ++fd) ::dup2(slave.fd, fd);
        ::execv(cargv[0], cargv.data());
        ::_exit(127);
      }
      // The master is read while cordon runs (a full pty would stall it),
      // until the pidfd says cordon ended, then until it is quiet.
      Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
      ASSERT_GE(pidfd.fd, 0);
      std::string seen;
      auto deadline = steady_clock::now() + std::chrono::seconds(60);
      for (;;) {
        struct pollfd p[2] = {{master.fd, POLLIN, 0}, {pidfd.fd, POLLIN, 0}};
        ::poll(p, 2, 1000);
        if (p[0].revents & POLLIN) seen += Drain(master.fd, milliseconds(0));
        if ((p[1].revents & POLLIN) || steady_clock::now() > deadline) break;
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      // (The master gets the slave's echo through the tty layer's work
      // queue, within microseconds: 100 ms of quiet is ample.)
      seen += Drain(master.fd, milliseconds(100));
      // Out of canonical mode, so that a pushed partial line counts too.
      struct termios tio {};
      ASSERT_EQ(::tcgetattr(slave.fd, &tio), 0);
      tio.c_lflag &= ~static_cast<tcflag_t>(ICANON);
      tio.c_cc[VMIN] = 0;
      tio.c_cc[VTIME] = 0;
      ASSERT_EQ(::tcsetattr(slave.fd, TCSANOW, &tio), 0);
      int queued = -1;
      ASSERT_EQ(::ioctl(slave.fd, TIOCINQ, &queued), 0);
      EXPECT_EQ(queued, 0) << "input was pushed into the test's terminal";
      char c;
      EXPECT_EQ(::read(slave.fd, &c, 1), 0) << "the test's terminal has input to read";
      EXPECT_EQ(seen.find("sti-canary"), std::string::npos) << seen;
      // The control: a push the test makes itself (it holds
      // CAP_SYS_ADMIN) is seen the same way, so the checks above can fail.
      char x = 'x';
      ASSERT_EQ(::ioctl(slave.fd, TIOCSTI, &x), 0) << std::strerror(errno);
      ASSERT_EQ(::ioctl(slave.fd, TIOCINQ, &queued), 0);
      EXPECT_EQ(queued, 1);
      EXPECT_EQ(Drain(master.fd, milliseconds(100)), "x") << "the echo of a push";
      // The result, which cordon printed on the terminal (\r\n and all).
      size_t open = seen.find("{\"");
      ASSERT_NE(open, std::string::npos) << "no result on the terminal: " << seen;
      json j = json::parse(seen.substr(open, seen.rfind('}') + 1 - open), nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << seen;
      EXPECT_EQ(j["release"]["dead"], true);
      EXPECT_TRUE(Enforced(j, "syscall_filter"));
      auto lines = Lines(j);
      ASSERT_TRUE(lines.contains("tty-inject")) << "the probe did not run: " << seen;
      for (const auto& [what, err] : lines) {
        // Each push, on every terminal it reached, was refused.
        if (what.starts_with("sti") || what.starts_with("linux") || what.starts_with("ioctl-")) {
          EXPECT_EQ(err, EPERM) << what << ": " << j["stdout"];
        }
      }
      // The pushes on its own pty, where nothing but the filter stood.
      EXPECT_TRUE(lines.contains("sti:pty")) << j["stdout"];
      // No terminal of the host was within reach at all where there is a
      // mount and a pid namespace (its own pty aside).
      if (Namespaced(j)) {
        for (const auto& [what, err] : lines) {
          if (what.starts_with("tty:")) ADD_FAILURE() << "reached " << what;
        }
      }
    }
  }
}

// --- Case 19: the host's loopback, ::1, an abstract socket and the
// metadata address (CVE-2020-15257). ---
//
// The test listens on 127.0.0.1, ::1 (where the host has it) and the
// abstract name "@canary-<token>"; the sandbox connects to each and to
// 169.254.169.254:80. Under standard and strict the connects fail and the
// listeners accept nothing. On the restricted host there is no network
// namespace: seccomp refuses IP sockets and Landlock's scope (6.12 and
// later) refuses abstract sockets outside the sandbox; `network` is
// reported degraded, saying whether abstract sockets stay in reach.
//
// `none` shares the host's network namespace on purpose: it promises
// limits and teardown, not network isolation. What it does promise is
// that it says so: its grant never claims `network`. There the loopback
// connects reach the test's listeners (the control that the listeners
// work); the metadata address is not tried from the host's network.
TEST_P(HostEscapeTest, HostLoopbackAbstractAndMetadataAddressesCannotBeReached) {
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Fd l4(Listen(AF_INET, reinterpret_cast<sockaddr*>(&a4), sizeof a4));
  ASSERT_GE(l4.fd, 0) << std::strerror(errno);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  Fd l6(Listen(AF_INET6, reinterpret_cast<sockaddr*>(&a6), sizeof a6));  // -1: no ::1 here
  std::string abstract = "canary-" + Token();
  Fd lu(ListenUnix(abstract, true));
  ASSERT_GE(lu.fd, 0) << std::strerror(errno);
  std::string calls =
      "connect4:127.0.0.1:" + std::to_string(Port(l4.fd)) + " connect-abstract:" + abstract;
  if (l6.fd >= 0) calls += " connect6:::1:" + std::to_string(Port(l6.fd));
  for (const char* level : {"standard", "strict", "none"}) {
    SCOPED_TRACE(level);
    bool none = std::string(level) == "none";
    // (`none` builds no view: the helpers are where they are, and binds
    // are refused there.)
    std::vector<std::string> options = {"--isolation", level};
    if (!none) options.insert(options.end(), {"--ro-bind", CORDON_HELPERS_DIR});
    Ran r = Sandboxed(
        "exec " + Probe() + " " + calls + (none ? "" : " connect4:169.254.169.254:80"), options);
    json j = Result(r);
    auto lines = Lines(j);
    ASSERT_TRUE(lines.contains("connect-abstract:" + abstract)) << r.out << r.err;
    if (none) {
      int reached = Accepted(l4.fd) + Accepted(lu.fd) + (l6.fd >= 0 ? Accepted(l6.fd) : 0);
      // (`none` does not ask for `network` at all: not claimed, not listed.)
      EXPECT_EQ(j["grant"]["enforced"].dump().find("\"network\""), std::string::npos)
          << "`none` claims a network boundary it lacks: " << j["grant"];
      EXPECT_EQ(reached, l6.fd >= 0 ? 3 : 2) << j["stdout"];  // the control
      continue;
    }
    // Without a network namespace or Landlock's scope (before 6.12) the
    // host's abstract sockets are in reach, and the grant must say so.
    bool abstract_open = false;
    if (!Enforced(j, "network")) {  // degraded, with its reason
      for (const auto& d : j["grant"]["degraded"]) {
        if (d["capability"] != "network") continue;
        const std::string reason = d["reason"];
        EXPECT_TRUE(reason.contains("Unix sockets stay reachable")) << reason;
        abstract_open = !reason.contains("Landlock keeps abstract ones out");
      }
    }
    int reached = Accepted(l4.fd) + (l6.fd >= 0 ? Accepted(l6.fd) : 0);
    const int reached_abstract = Accepted(lu.fd);  // drained either way
    if (!abstract_open) reached += reached_abstract;
    EXPECT_EQ(reached, 0) << "a host listener accepted a connection from the sandbox: "
                          << j["stdout"];
    for (const auto& [call, err] : lines) {
      if (call.starts_with("connect") && !(abstract_open && call.starts_with("connect-abstract"))) {
        EXPECT_NE(err, 0) << call << ": " << j["stdout"];
      }
    }
  }
}

// --- Case 20: a host service's pathname Unix socket. ---
//
// The socket (mode 0777, so that only the boundary stands between it and
// the sandbox) is in a host directory of the test. Without a bind the
// sandbox tries its host path and the /proc/self/root and /proc/1/root
// ways to it, and the listener accepts nothing. Binding its directory in
// (`--bind DIR` or `--ro-bind DIR`: connecting needs no write to the
// mount) is the caller's explicit choice, and then it is reachable.
//
// The restricted host has no mount namespace, and Landlock on this kernel
// does not govern connecting to a pathname socket: there the host path is
// reachable, and cordon says so (`network` degraded, naming Unix sockets),
// and a caller who requires `network` is refused before anything runs.
TEST_P(HostEscapeTest, AHostPathnameSocketIsReachableOnlyThroughABind) {
  std::string dir = host_ / "svc";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  std::string path = dir + "/sock";
  Fd listener(ListenUnix(path, false));
  ASSERT_GE(listener.fd, 0) << std::strerror(errno);
  ::chmod(path.c_str(), 0777);
  std::string unbound = "exec " + Probe() + " connect-unix:" + path +
                        " connect-unix:/proc/self/root" + path + " connect-unix:/proc/1/root" +
                        path;
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    json j = Result(Sandboxed(unbound, {"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR}));
    auto lines = Lines(j);
    ASSERT_TRUE(lines.contains("connect-unix:" + path)) << j;
    int reached = Accepted(listener.fd);
    if (Namespaced(j)) {
      EXPECT_EQ(reached, 0) << "the host socket was reached without a bind: " << j["stdout"];
      for (const auto& [call, err] : lines) {
        EXPECT_NE(err, 0) << call;
      }
    } else {
      // Reported, not hidden: the degraded reason names Unix sockets.
      EXPECT_FALSE(Enforced(j, "network"));
      EXPECT_NE(j["grant"]["degraded"].dump().find("Unix sockets stay reachable"),
                std::string::npos)
          << j["grant"]["degraded"];
      Ran refused = Sandboxed(
          unbound, {"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR, "--require", "network"});
      EXPECT_EQ(refused.status, 125) << refused.out << refused.err;
      EXPECT_EQ(Accepted(listener.fd), 0) << "a refused run ran";
    }
    for (const char* bind : {"--bind", "--ro-bind"}) {
      SCOPED_TRACE(bind);
      json b =
          Result(Sandboxed("exec " + Probe() + " connect-unix:" + path,
                           {"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR, bind, dir}));
      EXPECT_EQ(Lines(b)["connect-unix:" + path], 0) << b["stdout"];
      EXPECT_EQ(Accepted(listener.fd), 1) << "the bound socket was not reached: " << b["stdout"];
    }
  }
}

// --- Case 21: signals. ---
//
// Two canary processes of the test's own, as the caller's host uid (so
// that the kernel's uid check is not what stands in the way: a sandbox of
// nobody's would otherwise meet root's canaries), each in a session of
// its own. The probe (try-syscall "signals:") blocks every signal, then
// sends kill(-1, s) and kill(1, s) for every s, kill of each canary's
// host pid and group, SIGKILL through a pidfd of each canary's pid and of
// pids 1..64, F_SETOWN and F_SETOWN_EX to them with F_SETSIG SIGKILL and a
// write to arm SIGIO, and TIOCSPGRP and TIOCSIG on a pty of its own; then
// it exits 42. From outside: both canaries live (pidfd not readable, not
// reapable), and the run's result is what the command did: exited, 42,
// not timed out. (Under `none` there is no pid namespace or scope: it
// does not promise that host processes are out of reach, so it is not
// run; signalling the caller's own processes is what `none` allows.)
TEST_P(HostEscapeTest, SignalsReachNoHostProcessAndDoNotFalsifyTheResult) {
  uid_t uid = GetParam() == Caller::kRoot ? 0 : 65534;
  // A canary the test started; killed (by its pidfd) and reaped however
  // the test ends.
  struct Canary {
    pid_t pid = -1;
    Fd pidfd;
    ~Canary() {
      if (pidfd.fd >= 0) ::syscall(SYS_pidfd_send_signal, pidfd.fd, SIGKILL, nullptr, 0);
      if (pid > 0) ::waitpid(pid, nullptr, 0);
    }
  };
  std::vector<std::unique_ptr<Canary>> canaries;
  for (int i = 0; i < 2; ++i) {
    auto c = std::make_unique<Canary>();
    c->pid = ::fork();
    ASSERT_GE(c->pid, 0);
    if (c->pid == 0) {
      ::setsid();
      if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(1);
      ::execl("/bin/sleep", "sleep", "300", nullptr);
      ::_exit(127);
    }
    c->pidfd.fd = static_cast<int>(::syscall(SYS_pidfd_open, c->pid, 0));
    ASSERT_GE(c->pidfd.fd, 0);
    canaries.push_back(std::move(c));
  }
  std::string pids = std::to_string(canaries[0]->pid) + "," + std::to_string(canaries[1]->pid);
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    // The attack only where something holds it: a pid namespace, or
    // Landlock's signal scope. (Without either, kill(-1) from nobody's
    // sandbox would reach every process of nobody's on this host.)
    json claims = Result(Sandboxed("true", {"--isolation", level}));
    std::string view = claims["grant"]["mechanisms"].value("process_view", "");
    if (view != "pid_namespace" && view != "landlock") {
      EXPECT_FALSE(Enforced(claims, "process_view"));
      GTEST_SKIP() << "neither a pid namespace nor Landlock's signal scope here: " << claims;
    }
    Ran r = Sandboxed("exec " + Probe() + " signals:" + pids + " exit:42",
                      {"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR, "--timeout", "30"});
    json j = Result(r);
    for (const auto& c : canaries) {
      EXPECT_TRUE(AliveByPidfd(c->pidfd.fd, c->pid))
          << "the sandbox killed host process " << c->pid << ": " << j["stdout"];
    }
    auto lines = Lines(j);
    EXPECT_TRUE(lines.contains("tiocsig")) << "the probe did not get through: " << r.out << r.err;
    EXPECT_EQ(lines["kill-named"], 0) << j["stdout"];
    EXPECT_EQ(lines["pidfd-delivered-named"], 0) << j["stdout"];
    // In a pid namespace, pids 1..64 are the sandbox's own: its init takes
    // a SIGKILL sent from inside and drops it (as kill(1) is), unless
    // Landlock's signal scope (6.12) refuses the send first; the result
    // below shows the init kept its run. Without one they are the host's.
    if (view != "pid_namespace") {
      EXPECT_EQ(lines["pidfd-delivered"], 0) << j["stdout"];
    }
    EXPECT_LE(lines["tiocspgrp"], 0) << j["stdout"];
    // In a pid namespace the host pids name nothing to own; without one
    // (Landlock's scope) F_SETOWN takes the pid, and the kernel then
    // refuses to send the SIGIO, which is what the canaries show.
    if (view == "pid_namespace") {
      EXPECT_EQ(lines["setown-armed"], 0) << j["stdout"];
    }
    // The result is what the command did, whatever it sent to the init.
    EXPECT_EQ(j["outcome"], "exited") << r.out;
    EXPECT_EQ(j["exit_code"], 42) << r.out;
    EXPECT_EQ(j["timed_out"], false) << r.out;
  }
}

// --- Case 27: resource exhaustion inside the run's bounds. ---
//
// Run A, with --pids 32, --tmp-size 16M, --open-files 64 and --memory
// 256M (--permissive: an unprivileged caller here has no memory cgroup,
// and that limit is then reported degraded), forks until refused
// (fork_loop, whose children stay), fills /tmp and /dev/shm, makes empty
// files in /tmp until refused, and takes inotify instances and pipes
// (each filled) until its descriptors run out; then it holds all of it
// until the test lets it go. Meanwhile the test process forks, opens a
// pipe and an inotify instance, and writes and syncs a file on the host's
// disk, and run B, of the same caller, runs an ordinary job to the end.
// A's refusals are judged by the errno the kernel gave the probe
// (EAGAIN, ENOSPC, EMFILE): the bound itself is what is observed; that
// the host carried on is judged from outside.
//
// Not exhausted: inotify watches. The kernel bounds them per host uid
// (fs.inotify.max_user_watches) and by memory, not per sandbox: root's
// sandboxes run as leased uids of their own, but an unprivileged caller's
// sandboxes share that caller's uid, and exhausting it here would take
// the budget of every process of nobody's on this host. On the
// restricted host /tmp and /dev/shm are not writable at all (no mount
// namespace): the fills fail at once.
TEST_P(HostEscapeTest, ExhaustionStaysInsideTheRunsBounds) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  const long kTmpBytes = 16 << 20;
  std::string fifo = work_ / "release";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  ::chmod(fifo.c_str(), 0666);
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    std::string ready = work_ / "ready";
    ::unlink(ready.c_str());
    std::string script = Helper("fork_loop") + " 100000; exec " + Probe() +
                         " exhaust-fill:/tmp exhaust-fill:/dev/shm exhaust-inodes:/tmp"
                         " exhaust-inotify:- exhaust-pipes:- write:ready wait-fifo:release";
    auto start = steady_clock::now();
    Cordon a(RunArgs({"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR, "--timeout", "30",
                      "--pids", "32", "--tmp-size", "16M", "--open-files", "64", "--memory", "256M",
                      "--permissive", "--shell", script}),
             "", Prefix());
    // Until A holds everything (its marker file; polled, bounded: another
    // process writes it).
    bool held = false;
    while (steady_clock::now() - start < std::chrono::seconds(25) &&
           !(held = ::access(ready.c_str(), F_OK) == 0)) {
      if (Exited(a.pid())) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_TRUE(held) << "run A did not get to hold its resources";
    // The host carries on.
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(7);
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0) << std::strerror(errno);
    EXPECT_EQ(::write(p[1], "x", 1), 1);
    ::close(p[0]);
    ::close(p[1]);
    int in = ::inotify_init1(IN_CLOEXEC);
    EXPECT_GE(in, 0) << std::strerror(errno);
    if (in >= 0) ::close(in);
    {
      std::string block(1 << 20, 'h');
      Fd f(::open((host_ / "host-write").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      ASSERT_GE(f.fd, 0);
      EXPECT_EQ(::write(f.fd, block.data(), block.size()), static_cast<ssize_t>(block.size()));
      EXPECT_EQ(::fsync(f.fd), 0);
    }
    // Run B, beside it: an ordinary job (a pipe, a fork, a file in the
    // workspace) completes.
    Ran b = Sandboxed(
        "echo piped | cat; sh -c 'exit 3'; echo forked $?; head -c 1048576 /dev/zero > b-file; "
        "wc -c < b-file; rm b-file",
        {"--isolation", level});
    json jb = Result(b);
    EXPECT_EQ(jb["outcome"], "exited") << b.out << b.err;
    EXPECT_EQ(jb["exit_code"], 0) << b.out;
    EXPECT_EQ(jb["stdout"], "piped\nforked 3\n1048576\n") << jb["stderr"];
    // Let A go.
    for (int i = 0; i < 500; ++i) {
      int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (w >= 0) {
        ::close(w);
        break;
      }
      if (Exited(a.pid())) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    Ran ra = a.Wait();
    json ja = Result(ra);
    EXPECT_EQ(ja["outcome"], "exited") << ra.out << ra.err;
    auto lines = Lines(ja);
    std::string out = ja.value("stdout", "");
    int forked = -1;
    char why[32] = {0};
    ASSERT_EQ(std::sscanf(out.c_str(), "forked %d %31s", &forked, why), 2) << out << ja["stderr"];
    EXPECT_LT(forked, 32) << out;
    EXPECT_STREQ(why, "EAGAIN") << out;
    if (Namespaced(ja)) {
      // Both fills (/tmp, then /dev/shm) stopped at ENOSPC.
      EXPECT_NE(out.find("fill-errno 28\nexhaust-fill:/tmp 0\n"), std::string::npos) << out;
      EXPECT_NE(out.find("fill-errno 28\nexhaust-fill:/dev/shm 0\n"), std::string::npos) << out;
      std::istringstream s(out);
      for (std::string line; std::getline(s, line);) {
        if (line.starts_with("fill-got ")) {
          EXPECT_LE(std::atol(line.c_str() + 9), kTmpBytes) << line;
        }
      }
      // Empty files need no blocks: only an inode bound stops them.
      EXPECT_EQ(lines["inodes-errno"], ENOSPC) << out;
      EXPECT_LT(lines["inodes-got"], 50000) << out;  // the probe's own cap
    } else {
      // Nothing of the host's /tmp or /dev/shm is writable.
      EXPECT_EQ(lines["exhaust-fill:/tmp"], EACCES) << out;
      EXPECT_EQ(lines["exhaust-fill:/dev/shm"], EACCES) << out;
      EXPECT_EQ(lines["inodes-got"], 0) << out;
    }
    EXPECT_EQ(lines["inotify-errno"], EMFILE) << out;
    EXPECT_LT(lines["inotify-got"], 64) << out;
    EXPECT_EQ(lines["pipes-errno"], EMFILE) << out;
    EXPECT_LT(lines["pipes-got"], 32) << out;
    EXPECT_EQ(lines["write:ready"], 0) << out;
    EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(20));
  }
}

// --- Case 29: programs named like options (CVE-2024-32462 class). ---
//
// The test plants executables named `--bind`, `-e` and `--` in the
// workspace; each records its $0 and arguments in ran.log, and whether a
// bind of a host directory (holding the secret) appeared at /canary-bind.
// They are run through `cordon run -- ./--bind --bind HOST:/canary-bind
// -e --`, through PATH (`-- --bind ...`, `-- -e`, `-- -- x`), and through
// the daemon's POST /v1/runs with argv ["--bind", ...]. From outside: the
// planted program ran with exactly those arguments, nothing was bound
// (the program saw no /canary-bind) and the secret is in no output.
// The promise is the parser's, the same at every level.
TEST_P(HostEscapeTest, ProgramsNamedLikeOptionsRunAsPrograms) {
  const std::string script =
      "#!/bin/sh\n"
      "{ printf 'ran %s' \"${0##*/}\"; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo; "
      "test -e /canary-bind && echo BOUND; cat /canary-bind/secret.txt 2>/dev/null; } >> ran.log\n"
      "exit 0\n";
  for (const char* name : {"--bind", "-e", "--"}) {
    std::string path = work_ / name;
    std::ofstream(path) << script;
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }
  std::string bind = host_.path() + ":/canary-bind";
  std::string ran_log = work_ / "ran.log";
  // The PATH inside: the workspace is /workspace with a mount namespace,
  // its host path without one.
  std::string path_env = "PATH=/workspace:" + work_.path();
  struct Case {
    std::vector<std::string> argv;
    std::string ran;
  };
  const std::vector<Case> cases = {
      {{"./--bind", "--bind", bind, "-e", "--"}, "ran --bind [--bind] [" + bind + "] [-e] [--]"},
      {{"--bind", "--ro-bind", bind}, "ran --bind [--ro-bind] [" + bind + "]"},
      {{"-e", "--bind", bind}, "ran -e [--bind] [" + bind + "]"},
      {{"./-e", "-e", "x"}, "ran -e [-e] [x]"},
      {{"./--", "--", "--bind", bind}, "ran -- [--] [--bind] [" + bind + "]"},
      {{"--", "x"}, "ran -- [x]"},
  };
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    for (const Case& c : cases) {
      SCOPED_TRACE(c.argv[0]);
      ::unlink(ran_log.c_str());
      std::vector<std::string> args = RunArgs({"--isolation", level, "--env", path_env, "--"});
      args.insert(args.end(), c.argv.begin(), c.argv.end());
      Ran r = Cordon(args, "", Prefix()).Wait();
      json j = Result(r);
      EXPECT_EQ(j["exit_code"], 0) << r.out << r.err;
      EXPECT_EQ(Slurp(ran_log), c.ran + "\n") << r.out << r.err;
      EXPECT_EQ((r.out + r.err).find(secret_), std::string::npos);
    }
  }
  // The daemon, started by the caller, with the same argv as JSON.
  TempDir daemon_state;
  ::chmod(daemon_state.path().c_str(), 0777);
  std::vector<std::string> serve = {"serve", "--state-dir", daemon_state / "d", "--listen",
                                    "127.0.0.1:0"};
  if (GetParam() == Caller::kRoot) serve.insert(serve.end(), {"--cgroup-root", CgroupRoot()});
  Cordon daemon(serve, "", Prefix());
  json info;
  // serve.json appears once the daemon answers (polled, bounded).
  for (int i = 0; i < 3000 && !Exited(daemon.pid()); ++i) {
    info = json::parse(Slurp(daemon_state / "d/serve.json"), nullptr, false);
    if (!info.is_discarded() && info.value("pid", 0) == daemon.pid()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_FALSE(info.is_discarded()) << "the daemon did not start: " << Slurp(daemon.out_path());
  std::string token = Slurp(info["token_file"].get<std::string>());
  HttpClient client(info["urls"][0].get<std::string>(), token.substr(0, token.find('\n')));
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(std::string("daemon, ") + level);
    for (const Case& c : cases) {
      SCOPED_TRACE(c.argv[0]);
      ::unlink(ran_log.c_str());
      HttpResponse res = client.Post("/v1/runs", {{"argv", c.argv},
                                                  {"env", {{"PATH", path_env.substr(5)}}},
                                                  {"workspace", work_.path()},
                                                  {"isolation", level},
                                                  {"permissive", true},
                                                  {"limits", {{"timeout_ms", 30000}}}});
      ASSERT_EQ(res.status, 200) << res.body;
      json j = res.Json();
      EXPECT_EQ(j["exit_code"], 0) << res.body;
      EXPECT_EQ(Slurp(ran_log), c.ran + "\n") << res.body;
      EXPECT_EQ(res.body.find(secret_), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Callers, HostEscapeTest, kCallers, CallerName);

}  // namespace
}  // namespace cordon::testing
