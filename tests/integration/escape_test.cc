// The escape suite: each case is a real attempt from inside a sandbox,
// and each assertion is on what was observed outside (the secret is not in
// the output, the host file is unchanged, the host process is alive, the
// listener saw no connection), not on an exit code alone.
//
// Every case runs three ways: as root; as an unprivileged user (nobody),
// who gets a user namespace mapped to its own uid; and as nobody on a
// "restricted host" where user namespaces are refused (LINUX-NOTES.md), so
// that Landlock alone provides `filesystem` and what cannot be enforced
// must be reported degraded.
#include <arpa/inet.h>
#include <linux/keyctl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "escape_support.h"

namespace cordon::testing {
namespace {

TEST_P(EscapeTest, ANormalProgramRunsAndSeesASaneSystem) {
  Ran r = Sandboxed(
      "/usr/bin/python3 -c 'print(sum(range(10)))'; ls / | tr '\\n' ' '; echo; "
      "echo written > out.txt && cat out.txt; sh -c 'echo nested'; pwd");
  json j = Result(r);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  std::string out = j["stdout"];
  EXPECT_NE(out.find("45\n"), std::string::npos) << out;
  // (Landlock alone lets nothing list the host's root.)
  if (Namespaced(j)) {
    EXPECT_NE(out.find("usr"), std::string::npos) << out;
  }
  EXPECT_NE(out.find("written\nnested\n"), std::string::npos) << out << j["stderr"];
  // The workspace the test created is writable inside; what was written
  // is in the host directory, owned by the directory's owner. Where the
  // kernel cannot idmap it, root's sandbox writes as its outside uid,
  // which the run's warning names.
  EXPECT_EQ(Slurp(work_ / "out.txt"), "written\n");
  uid_t owner = GetParam() == Caller::kRoot ? 0u : 65534u;
  // So does one that runs as a uid of its own (no user namespace).
  if (GetParam() == Caller::kRoot &&
      (!KernelIdmaps(work_.path()) || TestProbe().SandboxesRunAsOwnUids())) {
    const std::string warnings = j["warnings"].dump();
    const std::string said = Namespaced(j) ? "outside uid " : "runs as uid ";
    const size_t at = warnings.find(said);
    ASSERT_NE(at, std::string::npos) << warnings;
    owner = static_cast<uid_t>(std::strtoul(warnings.c_str() + at + said.size(), nullptr, 10));
    EXPECT_NE(owner, 0u) << warnings;
  }
  struct stat st {};
  ASSERT_EQ(::stat((work_ / "out.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner);
  if (Namespaced(j)) {
    EXPECT_NE(out.find("/workspace\n"), std::string::npos) << out;
  }
}

TEST_P(EscapeTest, APlantedSecretOutsideTheBindsCannotBeRead) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  Ran r = Sandboxed("cat " + secret_path_ + "; cat /etc/shadow; ls " + host_.path() +
                    "; cat /proc/1/root" + secret_path_ + "; ls -R /tmp /workspace");
  json j = Result(r);
  EXPECT_TRUE(Enforced(j, "filesystem"));
  EXPECT_EQ((r.out + r.err).find(secret_), std::string::npos) << r.out;
  std::string shadow = Slurp("/etc/shadow");
  std::string root_hash = shadow.substr(0, shadow.find('\n'));
  if (root_hash.size() > 6) {
    EXPECT_EQ(std::string(j["stdout"]).find(root_hash), std::string::npos);
  }
}

TEST_P(EscapeTest, ASymlinkInTheWorkspaceDoesNotReachAHostSecret) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(::symlink(secret_path_.c_str(), (work_ / "link").c_str()), 0);
  ASSERT_EQ(
      ::symlink(
          ("../" + std::filesystem::path(host_.path()).filename().string() + "/secret.txt").c_str(),
          (work_ / "rel").c_str()),
      0);
  Ran r = Sandboxed("cat link; cat rel; cat /workspace/link");
  json j = Result(r);
  EXPECT_EQ((r.out + r.err).find(secret_), std::string::npos) << r.out;
}

TEST_P(EscapeTest, NothingOutsideTheWorkspaceAndTmpCanBeWritten) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  std::string token = Token();
  std::string planted = host_ / "planted.txt";
  std::ofstream(planted) << "original";
  ::chmod(planted.c_str(), 0666);  // writable by anyone on the host
  ::chmod(host_.path().c_str(), 0777);
  Ran r = Sandboxed("echo x > /usr/" + token + "; echo x > /etc/" + token + "; echo x > /" + token +
                    "; echo x > " + planted + "; echo x > " + host_.path() + "/" + token +
                    "; echo x > /tmp/" + token + " && echo tmp-ok");
  json j = Result(r);
  EXPECT_TRUE(Enforced(j, "filesystem"));
  for (const std::string& path :
       {"/usr/" + token, "/etc/" + token, "/" + token, host_.path() + "/" + token}) {
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
  EXPECT_EQ(Slurp(planted), "original");
  if (Namespaced(j)) {
    // A private /tmp: written inside, nothing of it on the host.
    EXPECT_NE(std::string(j["stdout"]).find("tmp-ok"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists("/tmp/" + token));
  }
}

TEST_P(EscapeTest, FillingTmpStopsAtItsCap) {
  Ran r = Sandboxed("head -c 8M /dev/zero > /tmp/fill; echo rc=$?; wc -c < /tmp/fill",
                    {"--tmp-size", "1M"});
  json j = Result(r);
  if (!Namespaced(j))
    GTEST_SKIP() << "no private /tmp without a mount namespace: " << j["warnings"];
  std::string out = j["stdout"];
  EXPECT_EQ(out.find("rc=0"), std::string::npos) << out;
  EXPECT_NE(std::string(j["stderr"]).find("No space left"), std::string::npos) << j["stderr"];
  long bytes = std::atol(out.substr(out.find('\n') + 1).c_str());
  EXPECT_LE(bytes, 1 << 20) << out;
}

TEST_P(EscapeTest, AHostProcessCanNeitherBeSeenNorSignalled) {
  // A process of the test's own, with a command line to look for.
  std::string marker = "61." + std::to_string(::getpid());
  pid_t host = ::fork();
  if (host == 0) {
    ::execl("/bin/sleep", "sleep", marker.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(host, 0);
  std::string pid = std::to_string(host);
  // "[6]1..." matches the marker but not grep's (or the shell's) own
  // command line.
  Ran r = Sandboxed("kill -9 " + pid + "; kill -TERM " + pid + "; cat /proc/" + pid +
                    "/cmdline; ps -eo args | grep -c '[6]" + marker.substr(1) + "'");
  json j = Result(r);
  bool alive = !Exited(host);
  ::kill(host, SIGKILL);
  ::waitpid(host, nullptr, 0);
  EXPECT_TRUE(alive) << "the sandbox killed a host process: " << r.out;
  if (Enforced(j, "process_view")) {
    std::string out = j["stdout"];
    EXPECT_EQ(out.find(marker), std::string::npos) << out;
    EXPECT_NE(out.find("0\n"), std::string::npos) << out;
  }
}

TEST_P(EscapeTest, TheSupervisorsEnvironmentCannotBeReadThroughProc) {
  if (std::string why = NoFilesystemBoundary(); !why.empty()) GTEST_SKIP() << why;
  std::string token = Token();
  ::setenv("CORDON_TEST_SUPERVISOR_SECRET", token.c_str(), 1);
  Ran r = Sandboxed(
      "for f in /proc/*/environ; do tr '\\0' '\\n' < $f; done; cat /proc/1/environ; "
      "cat /proc/$PPID/environ; cat /proc/self/environ");
  ::unsetenv("CORDON_TEST_SUPERVISOR_SECRET");
  Result(r);
  EXPECT_EQ((r.out + r.err).find(token), std::string::npos) << r.out;
}

TEST_P(EscapeTest, AHostLoopbackListenerCannotBeReached) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  struct sockaddr_in addr {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string port = std::to_string(ntohs(addr.sin_port));
  auto connected = [&] {
    int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return false;
    ::close(c);
    return true;
  };
  std::string connect =
      "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', " + port +
      "), timeout=2); print('connected')\"";
  Ran r = Sandboxed(connect);
  json j = Result(r);
  EXPECT_FALSE(connected()) << "the sandbox reached the host's loopback: " << r.out;
  EXPECT_EQ(std::string(j["stdout"]).find("connected"), std::string::npos);
  Enforced(j, "network");  // enforced, or degraded with its reason
  // The control: with the host's network (loud, explicit) it gets through,
  // so the refusal above was the boundary, not a broken test.
  Ran host = Sandboxed(connect, {"--network", "host"});
  json h = Result(host);
  EXPECT_TRUE(connected()) << host.out;
  bool warned = false;
  for (const auto& w : h["warnings"]) warned |= w.get<std::string>().find("--network host") == 0;
  EXPECT_TRUE(warned) << h["warnings"];
  ::close(listener);
}

TEST_P(EscapeTest, PtraceOfASiblingIsRefused) {
  Ran r = Sandboxed(
      "sleep 30 & /usr/bin/python3 -c \"import ctypes, sys\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "rc = libc.ptrace(16, int(sys.argv[1]), 0, 0)\n"
      "print('ptrace', rc, ctypes.get_errno())\n"
      "print([l for l in open('/proc/%s/status' % sys.argv[1]) if l.startswith('TracerPid')][0])"
      "\" $!; kill $!");
  json j = Result(r);
  std::string out = j["stdout"];
  EXPECT_NE(out.find("ptrace -1 1\n"), std::string::npos) << out << j["stderr"];  // EPERM
  EXPECT_NE(out.find("TracerPid:\t0"), std::string::npos) << out;
  EXPECT_TRUE(Enforced(j, "syscall_filter"));
}

// (The workspace is itself a tmpfs where /tmp is one: what is counted is
// the mounts at /workspace before and after; none without a mount
// namespace.)
TEST_P(EscapeTest, MountingATmpfsIsRefused) {
  Ran r = Sandboxed(
      "echo before $(grep -c ' /workspace ' /proc/self/mounts); "
      "/usr/bin/python3 -c \"import ctypes\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "rc = libc.mount(b'none', b'/workspace', b'tmpfs', 0, None)\n"
      "print('mount', rc, ctypes.get_errno())\"; "
      "echo after $(grep -c ' /workspace ' /proc/self/mounts)");
  json j = Result(r);
  std::string out = j["stdout"];
  EXPECT_NE(out.find("mount -1 1\n"), std::string::npos) << out << j["stderr"];
  auto count = [&](const std::string& tag) {
    size_t at = out.find(tag + " ");
    return at == std::string::npos ? -1 : std::atoi(out.c_str() + at + tag.size() + 1);
  };
  EXPECT_GE(count("before"), 0) << out;
  EXPECT_EQ(count("after"), count("before")) << out;  // no mount appeared
}

TEST_P(EscapeTest, ANestedUserNamespaceIsRefused) {
  Ran r = Sandboxed(
      "readlink /proc/self/ns/user; /usr/bin/python3 -c \"import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
      "print(os.readlink('/proc/self/ns/user'))\"");
  json j = Result(r);
  std::string out = j["stdout"];
  EXPECT_NE(out.find("unshare -1 1\n"), std::string::npos) << out << j["stderr"];
  // Still in the namespace it started in.
  std::string first = out.substr(0, out.find('\n'));
  EXPECT_NE(out.rfind(first), out.find(first)) << out;
}

TEST_P(EscapeTest, TiocstiCannotPushInput) {
  Ran r = Sandboxed(
      "/usr/bin/python3 -c \"import fcntl, os, termios, select\n"
      "master, slave = os.openpty()\n"
      "try:\n"
      "    fcntl.ioctl(slave, termios.TIOCSTI, b'X')\n"
      "    print('pushed')\n"
      "except OSError as e:\n"
      "    print('refused', e.errno)\n"
      "print('readable', bool(select.select([slave], [], [], 0.2)[0]))\"");
  json j = Result(r);
  std::string out = j["stdout"];
  EXPECT_NE(out.find("refused 1\n"), std::string::npos) << out << j["stderr"];
  EXPECT_NE(out.find("readable False"), std::string::npos) << out;
}

TEST_P(EscapeTest, NoPrivilegeIsHeldOrGained) {
  Ran r = Sandboxed(
      "grep -E '^(CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr '\\t' ' '; "
      "ulimit -c; /usr/bin/su -c 'echo became-root' 2>&1 | head -1");
  json j = Result(r);
  std::string out = j["stdout"];
  EXPECT_NE(out.find("CapEff: 0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("CapAmb: 0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs: 1"), std::string::npos) << out;
  EXPECT_NE(out.find("Seccomp: 2"), std::string::npos) << out;
  if (Namespaced(j)) {
    // (Without CAP_SETPCAP there is no bounding set to empty: the caller
    // had nothing in it to gain.)
    EXPECT_NE(out.find("CapBnd: 0000000000000000"), std::string::npos) << out;
    EXPECT_NE(out.find("\n0\n"), std::string::npos) << out;  // no core dumps
  }
  EXPECT_EQ(out.find("became-root"), std::string::npos) << out;  // set-uid su gains nothing
  EXPECT_TRUE(Enforced(j, "privileges"));
}

TEST_P(EscapeTest, PidOneShowsNothingOfTheSupervisor) {
  Ran r = Sandboxed("tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/comm");
  json j = Result(r);
  if (j["grant"]["mechanisms"]["process_view"] != "pid_namespace") {
    GTEST_SKIP() << "no pid namespace here: pid 1 is the host's";
  }
  std::string out = j["stdout"];
  EXPECT_EQ(out.find("--state-dir"), std::string::npos) << out;
  EXPECT_EQ(out.find(state_.path()), std::string::npos) << out;
  EXPECT_TRUE(out.starts_with("cordon-init")) << out;
  EXPECT_TRUE(out.ends_with("\ncordon-init\n")) << out;
}

TEST_P(EscapeTest, TheInitForwardsSigtermAndReapsOrphans) {
  // An orphan exits early (the init must reap it: no zombie of pid 1 stays);
  // at the deadline SIGTERM reaches the command's trap, through the init
  // where the pid namespace holds the tree. (The shell's own `sleep 60` gets
  // SIGTERM too and may be the shell's zombie for a moment: not counted.)
  Ran r = Sandboxed(
      "trap 'echo got-term; ps -e -o stat=,ppid= | grep -c \"^Z *1$\"; exit 3' TERM; "
      "(sleep 0.05 &); sleep 60 & wait",
      {"--timeout", "1"});
  json j = Result(r);
  EXPECT_EQ(j["outcome"], "timed_out") << r.out;
  EXPECT_EQ(j["exit_code"], 3) << r.out;
  std::string out = j["stdout"];
  EXPECT_TRUE(out.starts_with("got-term\n")) << r.out << r.err;
  // (Without a pid namespace ps sees the host's processes, zombies of
  // others included.)
  if (j["grant"]["mechanisms"]["process_view"] == "pid_namespace") {
    EXPECT_EQ(out, "got-term\n0\n");
  }
}

TEST_P(EscapeTest, StrictRefusesRawSockets) {
  Ran r = Sandboxed(
      "/usr/bin/python3 -c \"import socket\n"
      "for family, kind in ((socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, "
      "socket.SOCK_DGRAM), (socket.AF_INET, socket.SOCK_STREAM)):\n"
      "    try:\n"
      "        socket.socket(family, kind, 1 if kind == socket.SOCK_RAW else 0); print('ok')\n"
      "    except OSError as e:\n"
      "        print('refused', e.errno)\"",
      {"--isolation", "strict"});
  json j = Result(r);
  std::string out = j["stdout"];
  EXPECT_EQ(out.substr(0, out.find('\n')), "refused 1") << out << j["stderr"];
  EXPECT_NE(out.find("\nrefused "), std::string::npos) << out;  // AF_PACKET
  if (Namespaced(j)) {  // (without a network namespace no IP socket is allowed)
    EXPECT_TRUE(out.ends_with("ok\n")) << out;  // a TCP socket is still fine
  }
}

// The sleeps' command lines carry the marker; the shell's text names it
// only through $n, so nothing else matches.
std::string MarkedScript(const std::string& n, const std::string& then) {
  return "export n=" + n + "; setsid sh -c '(sleep 300.${n}7 &)'; " + then;
}

TEST_P(EscapeTest, ASetsidDoubleForkedEscapeeDoesNotOutliveTheRun) {
  if (!TreeHeld()) {
    // Without namespaces or a cgroup a process group is all there is:
    // the escapee would get away, and the run says so up front.
    json j = Result(Sandboxed("true"));
    EXPECT_FALSE(Enforced(j, "process_tree"));
    return;
  }
  std::string n = std::to_string(::getpid());
  Ran r = Sandboxed(MarkedScript(n, "sleep 0.2; echo started"));
  json j = Result(r);
  EXPECT_NE(std::string(j["stdout"]).find("started"), std::string::npos) << r.out << r.err;
  EXPECT_TRUE(LiveProcessesWith("300." + n + "7").empty()) << "an escapee outlived the run";
  EXPECT_TRUE(Enforced(j, "process_tree"));
}

TEST_P(EscapeTest, AForkBombIsBoundedAndTornDown) {
  Ran r = Sandboxed("exec " + Helper("fork_loop") + " 100000",
                    {"--pids", "32", "--ro-bind", CORDON_HELPERS_DIR});
  json j = Result(r);
  ASSERT_EQ(j["outcome"], "exited") << r.out << r.err;
  int forked = -1;
  ASSERT_EQ(std::sscanf(j["stdout"].get<std::string>().c_str(), "forked %d", &forked), 1) << r.out;
  EXPECT_LT(forked, 32);
  EXPECT_TRUE(LiveProcessesWith(Helper("fork_loop")).empty());
}

TEST_P(EscapeTest, AMemoryBombIsOomKilled) {
  if (GetParam() != Caller::kRoot) GTEST_SKIP() << "needs a memory cgroup: root only here";
  if (!TestProbe().Status(contain::Capability::kMemory).enforceable) {
    GTEST_SKIP() << TestProbe().Status(contain::Capability::kMemory).reason;
  }
  Ran r = Sandboxed("exec " + Helper("alloc") + " 1024",
                    {"--memory", "64M", "--ro-bind", CORDON_HELPERS_DIR});
  json j = Result(r);
  EXPECT_EQ(j["outcome"], "oom_killed") << r.out;
  EXPECT_EQ(j["oom_killed"], true);
}

TEST_P(EscapeTest, AKilledSupervisorsSandboxIsReaped) {
  if (!TreeHeld()) GTEST_SKIP() << "process_tree is degraded here (see the escapee case)";
  std::string n = std::to_string(::getpid());
  std::string marker = "300." + n + "7";
  std::vector<std::string> args = {"run", "--state-dir", state_ / "s", "--workspace", work_.path()};
  if (GetParam() == Caller::kRoot) {
    args.push_back("--cgroup-root");
    args.push_back(CgroupRoot());
  }
  args.push_back("--shell");
  args.push_back(MarkedScript(n, "sleep 300.${n}7"));
  Cordon c(args, "", Prefix());
  // Until both sleeps run (bounded; there is no event to wait on).
  for (int i = 0; i < 500 && LiveProcessesWith(marker).size() < 2; ++i) ::usleep(10000);
  ASSERT_EQ(LiveProcessesWith(marker).size(), 2u) << "the sandbox did not start";
  ::kill(c.pid(), SIGKILL);  // the supervisor, which this test started
  c.Wait();
  EXPECT_EQ(LiveProcessesWith(marker).size(), 2u);  // orphaned, until reap
  Ran reap = Cordon({"reap", "--json", "--state-dir", state_ / "s"}, "", Prefix()).Wait();
  EXPECT_EQ(reap.status, 0) << reap.out << reap.err;
  EXPECT_TRUE(LiveProcessesWith(marker).empty()) << reap.out;
}

// --- Issue 13: the system-call and socket classes. ---
//
// Each runs under kFilteredLevels only (escape_support.h says why). The
// probe is tests/helpers/try-syscall.c.

// Case 14: the nested user-namespace kernel surface (CVE-2021-3493,
// CVE-2023-0386, CVE-2022-0185, CVE-2024-1086).
TEST_P(EscapeTest, TheNestedUserNamespaceSurfaceIsRefused) {
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    std::string token = Token();
    // After the attempts to make /usr writable, a write there: the host's
    // /usr is where it would land.
    Probed p = TrySyscalls(level,
                           "unshare clone-newuser setns fsopen fsopen-overlay fsmount fsconfig "
                           "fspick open_tree move_mount mount_setattr-usr overlay "
                           "netlink-netfilter write:/usr/" +
                               token);
    for (const char* call :
         {"unshare", "clone-newuser", "setns", "fsopen", "fsopen-overlay", "fsmount", "fsconfig",
          "fspick", "open_tree", "move_mount", "mount_setattr-usr", "overlay"}) {
      EXPECT_EQ(p.err[call], EPERM) << call << ": " << p.result["stdout"];
    }
    // EPROTONOSUPPORT where netlink is allowed (standard); EOPNOTSUPP where
    // it is not (strict, no network namespace: the errno libzmq's
    // getifaddrs call survives, seccomp.cc).
    int nf = p.err["netlink-netfilter"];
    EXPECT_TRUE(nf == EPROTONOSUPPORT || nf == EOPNOTSUPP) << p.result["stdout"];
    EXPECT_NE(p.err["write:/usr/" + token], 0) << p.result["stdout"];
    EXPECT_FALSE(std::filesystem::exists("/usr/" + token));
  }
}

// Case 15: io_uring, bpf, perf_event_open, userfaultfd and the keyrings
// (CVE-2016-0728). A canary key in the test's own session keyring, which
// cordon's process inherits, is not visible in /proc/keys inside.
TEST_P(EscapeTest, KernelExtensionPointsAndKeyringsAreRefused) {
  std::string canary = "cordon-canary-" + Token();
  long key = ::syscall(SYS_add_key, "user", canary.c_str(), "x", 1, KEY_SPEC_SESSION_KEYRING);
  if (key < 0) GTEST_SKIP() << "add_key: " << std::strerror(errno) << " (no keyrings here)";
  // The control: the test itself sees it, so its absence inside means
  // something.
  bool seen_outside = Slurp("/proc/keys").find(canary) != std::string::npos;
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    Probed p = TrySyscalls(level,
                           "io_uring_setup io_uring_enter io_uring_register bpf perf_event_open "
                           "userfaultfd keyctl add_key request_key",
                           "cat /proc/keys; ");
    for (const char* call :
         {"io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
          "userfaultfd", "keyctl", "add_key", "request_key"}) {
      EXPECT_EQ(p.err[call], EPERM) << call << ": " << p.result["stdout"];
    }
    EXPECT_EQ(p.result.dump().find(canary), std::string::npos) << p.result["stdout"];
  }
  ::syscall(SYS_keyctl, KEYCTL_INVALIDATE, key);
  EXPECT_TRUE(seen_outside) << "the canary key was not in the test's own /proc/keys";
}

// A kernel without IA32 emulation (ia32_emulation=false, or built
// without it) has no int 0x80 gate: the call faults before seccomp sees it,
// and try-syscall reports -1 (NO_ABI). That is asked here, outside any
// sandbox, so that a sandbox's -1 is accepted only where the host's own
// answer is the same.
int HostI386Getpid() {
  std::string out;
  if (FILE* f = ::popen((Helper("try-syscall") + " i386-getpid").c_str(), "r")) {
    char buf[256];
    while (::fgets(buf, sizeof buf, f) != nullptr) out += buf;
    ::pclose(f);
  }
  EXPECT_TRUE(out.starts_with("i386-getpid ")) << out;
  return std::atoi(out.c_str() + out.rfind(' ') + 1);
}

// Case 16: the seccomp ABI. i386 calls through int 0x80 (seccomp sees
// AUDIT_ARCH_I386: the whole ABI is refused, getpid the control), x32
// numbers (bit 30: libseccomp's x86-64 filter sends them to the bad-arch
// action, ENOSYS, before the kernel, which may lack x32, is asked), and
// socket() with a family whose high 32 bits are set, which the kernel
// would truncate to an int.
TEST_P(EscapeTest, OtherSystemCallAbisAreRefused) {
  static const int host_i386 = HostI386Getpid();
  ASSERT_TRUE(host_i386 == 0 || host_i386 == -1) << host_i386;
  const int i386_refused = host_i386 == 0 ? ENOSYS : -1;
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    Probed p = TrySyscalls(level,
                           "i386-getpid i386-ptrace i386-mount i386-unshare x32-ptrace x32-mount "
                           "x32-unshare socket64-vsock socket64-inet socket64-packet");
    for (const char* call : {"i386-getpid", "i386-ptrace", "i386-mount", "i386-unshare"}) {
      EXPECT_EQ(p.err[call], i386_refused) << call << ": " << p.result["stdout"];
    }
    for (const char* call : {"x32-ptrace", "x32-mount", "x32-unshare"}) {
      EXPECT_EQ(p.err[call], ENOSYS) << call << ": " << p.result["stdout"];
    }
    for (const char* call : {"socket64-vsock", "socket64-inet"}) {
      EXPECT_EQ(p.err[call], EAFNOSUPPORT) << call << ": " << p.result["stdout"];
    }
    // (A raw socket: strict's rule for every raw socket may answer first.)
    int packet = p.err["socket64-packet"];
    EXPECT_TRUE(packet == EAFNOSUPPORT || packet == EPERM) << p.result["stdout"];
  }
}

// Case 17: every socket family from 0 to AF_MAX with every type (and
// every netlink protocol). Only AF_UNIX, AF_INET, AF_INET6 and
// NETLINK_ROUTE (standard only) can be made, and no kernel module was
// loaded for the rest (CVE-2010-3904, CVE-2021-26708). (A kernel built
// without modules has no /proc/modules: then "unchanged" is "still
// absent", and the refusal itself is what is observed.)
TEST_P(EscapeTest, OnlyInternetUnixAndRouteNetlinkSocketsCanBeMade) {
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    bool strict = std::string(level) == "strict";
    bool had_modules = std::filesystem::exists("/proc/modules");
    std::string modules = Slurp("/proc/modules");
    Probed p =
        TrySyscalls(level, "socket-families vsock modify_ldt move_pages mbind migrate_pages");
    EXPECT_EQ(std::filesystem::exists("/proc/modules"), had_modules);
    EXPECT_EQ(Slurp("/proc/modules"), modules) << "a module was loaded";
    // Without a network namespace no IP socket is allowed at all.
    bool ip = Namespaced(p.result);
    std::set<std::string> made(p.open.begin(), p.open.end());
    for (const std::string& line : made) {
      int family = -1, type = -1, protocol = 0;
      bool pair = line.starts_with("socketpair ");
      std::sscanf(line.c_str(), pair ? "socketpair %d %d" : "open %d %d %d", &family, &type,
                  &protocol);
      bool allowed = family == AF_UNIX;
      if (!pair && ip && (family == AF_INET || family == AF_INET6)) {
        allowed = type != SOCK_RAW && type != SOCK_PACKET;
      }
      if (!pair && ip && !strict && family == AF_NETLINK) allowed = protocol == 0;
      if (!pair && strict && type == SOCK_RAW) allowed = false;
      EXPECT_TRUE(allowed) << "made under " << level << ": " << line;
    }
    // What stays works (the control: the probe really made sockets).
    EXPECT_TRUE(made.contains("open 1 1 0")) << p.result["stdout"];
    EXPECT_TRUE(made.contains("socketpair 1 1")) << p.result["stdout"];
    if (ip && Enforced(p.result, "network")) {
      EXPECT_TRUE(made.contains("open 2 1 0")) << p.result["stdout"];
      EXPECT_EQ(made.contains("open 16 3 0"), !strict) << p.result["stdout"];
    }
    EXPECT_EQ(p.err["vsock"], EAFNOSUPPORT) << p.result["stdout"];
    for (const char* call : {"modify_ldt", "move_pages", "mbind", "migrate_pages"}) {
      EXPECT_EQ(p.err[call], EPERM) << call << ": " << p.result["stdout"];
    }
  }
}

// Case 18: raw sockets, packet sockets (CVE-2020-14386) and ping sockets.
// In an empty network namespace a raw socket would see nothing the test
// could watch for; the refusal is what is observed.
TEST_P(EscapeTest, RawPacketAndPingSocketsAreRefused) {
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    Probed p = TrySyscalls(level, "raw4 raw6 packet packet-dgram inet-packet ping4 ping6");
    for (const char* call : {"raw4", "raw6", "inet-packet", "ping4", "ping6"}) {
      // EAFNOSUPPORT where no IP family is allowed at all (no network
      // namespace).
      int err = p.err[call];
      EXPECT_TRUE(err == EPERM || (!Namespaced(p.result) && err == EAFNOSUPPORT))
          << call << ": " << p.result["stdout"];
    }
    // The family is refused; for the raw one strict's rule for every raw
    // socket may answer first.
    EXPECT_TRUE(p.err["packet"] == EAFNOSUPPORT || p.err["packet"] == EPERM) << p.result["stdout"];
    EXPECT_EQ(p.err["packet-dgram"], EAFNOSUPPORT) << p.result["stdout"];
  }
}

// The host's realtime clock against its monotonic one, in seconds.
double ClockOffset() {
  struct timespec real {
  }, mono{};
  ::clock_gettime(CLOCK_REALTIME, &real);
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  return static_cast<double>(real.tv_sec - mono.tv_sec) +
         static_cast<double>(real.tv_nsec - mono.tv_nsec) / 1e9;
}

// Case 28: clock_settime and adjtimex (each would move the clock 5 s
// forward) are refused, and the host's clock did not move. Reading the
// clock's state through adjtimex still works.
TEST_P(EscapeTest, TheHostClockCannotBeSet) {
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    double before = ClockOffset();
    Probed p = TrySyscalls(level, "clock_settime settimeofday adjtimex adjtimex-read");
    double moved = ClockOffset() - before;
    EXPECT_LT(std::abs(moved), 1.0) << "the host clock moved by " << moved << " s";
    EXPECT_EQ(p.err["clock_settime"], EPERM) << p.result["stdout"];
    EXPECT_EQ(p.err["settimeofday"], EPERM) << p.result["stdout"];
    EXPECT_EQ(p.err["adjtimex"], EPERM) << p.result["stdout"];  // the kernel's: no CAP_SYS_TIME
    EXPECT_EQ(p.err["adjtimex-read"], 0) << p.result["stdout"];
  }
}

// flatpak's tests/test-seccomp.sh, compared: the calls both allow fail
// with the kernel's errno for their bad arguments (not over-blocked), and
// the calls both refuse fail with the errno flatpak expects.
TEST_P(EscapeTest, TheFilterAgreesWithFlatpaksOnCallsBothJudge) {
  for (const char* level : kFilteredLevels) {
    SCOPED_TRACE(level);
    Probed p = TrySyscalls(level,
                           "chmod listen prctl ioctl-TIOCNOTTY chroot clone3 ioctl-TIOCSTI "
                           "ioctl-TIOCSTI-high ioctl-TIOCLINUX ptrace mount");
    const std::map<std::string, int> expected = {{"chmod", EFAULT},
                                                 {"listen", EBADF},
                                                 {"prctl", EFAULT},
                                                 {"ioctl-TIOCNOTTY", EBADF},
                                                 {"chroot", EPERM},
                                                 {"clone3", ENOSYS},
                                                 {"ioctl-TIOCSTI", EPERM},
                                                 {"ioctl-TIOCSTI-high", EPERM},
                                                 {"ioctl-TIOCLINUX", EPERM},
                                                 {"ptrace", EPERM},
                                                 {"mount", EPERM}};
    for (const auto& [call, err] : expected) {
      EXPECT_EQ(p.err[call], err) << call << ": " << p.result["stdout"];
    }
  }
}

// As root, the workspace is idmapped: its owner, whoever that is, is the
// sandbox's root, and what the sandbox creates belongs to that owner. On a
// kernel that cannot idmap it, or without namespaces, the caller's
// directory is still never chowned: the run says what the sandbox may do
// there, and the sandbox, an outside uid of its own, may not write into a
// 0755 directory of someone else's.
TEST(IdmappedWorkspaceTest, AWorkspaceOwnedBySomeoneElseStaysTheirs) {
  if (::geteuid() != 0) GTEST_SKIP() << "idmapped mounts need root";
  TempDir state, work;
  ASSERT_EQ(::chown(work.path().c_str(), 12345, 23456), 0);
  ::chmod(work.path().c_str(), 0755);
  Ran r = Cordon({"run", "--state-dir", state.path(), "--cgroup-root", CgroupRoot(), "--workspace",
                  work.path(), "--json", "--shell", "stat -c '%u %g' .; echo x > made"})
              .Wait();
  json j = json::parse(r.out);
  struct stat st {};
  const bool own_view = SandboxNamespaces();
  if (own_view && KernelIdmaps(work.path())) {
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_TRUE(j["warnings"].empty()) << j["warnings"];  // idmapping worked
    EXPECT_EQ(j["stdout"], "0 0\n");
    ASSERT_EQ(::stat((work / "made").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 12345u);
    EXPECT_EQ(st.st_gid, 23456u);
    return;
  }
  EXPECT_NE(r.status, 0) << r.out << r.err;  // the write was refused
  // Someone else's, seen from inside: unmapped in a user namespace, as it
  // is without one.
  EXPECT_EQ(j["stdout"], own_view ? "65534 65534\n" : "12345 23456\n");
  const std::string said = j["warnings"].dump();
  EXPECT_NE(said.find(own_view ? "is not idmapped" : "no user namespace: the sandbox runs as uid"),
            std::string::npos)
      << said;
  EXPECT_NE(::stat((work / "made").c_str(), &st), 0);
  ASSERT_EQ(::stat(work.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 12345u);  // never chowned
  EXPECT_EQ(st.st_gid, 23456u);
}

// A root supervisor's supplementary groups (here root's and adm's) would
// still grant access to host files inside, though they would show as
// nogroup; the sandbox gets none.
TEST(SandboxGroupsTest, ASandboxOfRootCarriesNoSupplementaryGroups) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv is not installed";
  TempDir state;
  Ran r = Cordon({"run", "--state-dir", state.path(), "--cgroup-root", CgroupRoot(), "--json",
                  "--shell", "grep Groups /proc/self/status"},
                 "", {"/usr/bin/setpriv", "--groups", "0,4", "--"})
              .Wait();
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  std::string groups = json::parse(r.out)["stdout"];
  ASSERT_EQ(groups.rfind("Groups:", 0), 0u) << groups;
  EXPECT_EQ(groups.find_first_of("0123456789"), std::string::npos) << groups;
}

INSTANTIATE_TEST_SUITE_P(Callers, EscapeTest, kCallers, CallerName);

}  // namespace
}  // namespace cordon::testing
