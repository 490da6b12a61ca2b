// The cordon binary as users run it: exit statuses, JSON, pass-through,
// signals, a killed supervisor and reap, an unprivileged caller.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "cordon_cli.h"

namespace cordon::testing {
namespace {

TEST_F(CliTest, JsonResultOfAHappyRun) {
  Ran r = Run({"--json", "--", "/bin/echo", "hi"});
  ASSERT_EQ(r.status, 0) << r.err;
  json j = r.Json();
  EXPECT_EQ(j["outcome"], "exited");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["stdout"], "hi\n");
  EXPECT_EQ(j["stdout_bytes"], 3);
  EXPECT_EQ(j["release"]["dead"], true);
  EXPECT_TRUE(j["setup_error"].is_null());
  for (const char* key : {"wall_ms", "cpu_user_ms", "cpu_system_ms", "max_rss_bytes"}) {
    EXPECT_TRUE(j["usage"][key].is_number()) << key;
  }
  EXPECT_TRUE(j["grant"]["id"].is_string());
  EXPECT_TRUE(j["grant"]["enforced"].is_array());
}

TEST_F(CliTest, ExitStatusesFollowTheContract) {
  EXPECT_EQ(Run({"--shell", "exit 3"}).status, 3);
  EXPECT_EQ(Run({"--shell", "kill -TERM $$"}).status, 128 + SIGTERM);
  EXPECT_EQ(Run({"--timeout", "0.2", "--", "/bin/sleep", "60"}).status, 124);
  Ran missing = Run({"--", "/no/such/program"});
  EXPECT_EQ(missing.status, 127);
  EXPECT_NE(missing.err.find("ENOENT"), std::string::npos) << missing.err;
  EXPECT_EQ(Run({"--", "/etc/passwd"}).status, 126);
  EXPECT_EQ(Run({"--memory", "0", "--", "/bin/true"}).status, 125);
}

// A small --open-files holds under every isolation level: the limit
// applies to the command, after the sandbox's own setup (Landlock opens a
// descriptor per rule) and not during it.
TEST_F(CliTest, ASmallOpenFilesLimitHoldsUnderEveryIsolation) {
  for (const char* level : {"none", "standard", "strict"}) {
    SCOPED_TRACE(level);
    Ran r = Run({"--isolation", level, "--open-files", "6", "--json", "--shell",
                 "ulimit -n; exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null && echo opened"});
    json j = r.Json();
    EXPECT_TRUE(j["setup_error"].is_null()) << j;
    // Past the limit the shell cannot open another descriptor.
    EXPECT_EQ(j["stdout"], "6\n") << j;
    EXPECT_NE(j.value("stderr", "").find("Too many open files"), std::string::npos) << j;
  }
}

TEST_F(CliTest, CpusIsCheckedAndEnforced) {
  for (const char* bad : {"0", "-1", "half", "1e3", "5000"}) {
    Ran r = Run({"--cpus", bad, "--", "/bin/true"});
    EXPECT_EQ(r.status, 125) << bad;
    EXPECT_NE(r.err.find("--cpus"), std::string::npos) << bad << ": " << r.err;
  }
  Ran probe = Cordon({"probe", "--json", "--cgroup-root", CgroupRoot()}).Wait();
  ASSERT_EQ(probe.status, 0) << probe.err;
  json probed = probe.Json();
  json cpu;
  for (const json& c : probed["capabilities"]) {
    if (c["capability"] == "cpu") cpu = c;
  }
  ASSERT_TRUE(cpu.is_object()) << probe.out;
  if (!cpu["enforceable"].get<bool>()) GTEST_SKIP() << cpu["reason"];
  Ran r = Run({"--isolation", "none", "--cpus", "0.5", "--json", "--", "/bin/true"});
  ASSERT_EQ(r.status, 0) << r.err;
  json j = r.Json();
  const json& enforced = j["grant"]["enforced"];
  EXPECT_NE(std::find(enforced.begin(), enforced.end(), "cpu"), enforced.end()) << enforced;
  EXPECT_EQ(j["grant"]["mechanisms"]["cpu"], cpu["mechanism"]);
}

// In a sanitizer build (make asan), ASan's clone() interceptor warns in the
// command's process, which runs on a stack of its own before its execve, and
// the warning lands in the command's stderr. It is ASan's, not the run's.
std::string WithoutAsanStackWarning(std::string err) {
#ifdef __SANITIZE_ADDRESS__
  const std::string warning = "WARNING: ASan is ignoring requested __asan_handle_no_return";
  const std::string last = "For details see https://github.com/google/sanitizers/issues/189\n";
  if (size_t at = err.find(warning); at != std::string::npos) {
    size_t start = err.rfind("==", err.rfind("==", at) - 1);
    size_t end = err.find(last, at);
    if (start != std::string::npos && end != std::string::npos) {
      err.erase(start, end + last.size() - start);
    }
  }
#endif
  return err;
}

// cordon's own notes share the command's stderr, each a line of its own
// ("cordon run: warning: ...", "cordon run: degraded: ...": on a kernel
// that cannot idmap the default workspace, the current directory, or a
// host without user namespaces); what is left is the command's.
std::string WithoutCordonNotes(const std::string& err) {
  std::string kept;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("cordon run: ")) kept += line + "\n";
  }
  return kept;
}

TEST_F(CliTest, OutputPassesThroughAndStdinIsFed) {
  Ran r = Run({"--stdin", "-", "--", "/bin/sh", "-c", "cat; echo to-err >&2"}, "from stdin\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "from stdin\n");
  EXPECT_EQ(WithoutCordonNotes(WithoutAsanStackWarning(r.err)), "to-err\n");
}

TEST_F(CliTest, TheEnvironmentIsExactlyWhatWasDeclared) {
  ::setenv("CORDON_TEST_SECRET_TOKEN", "do-not-leak", 1);
  Ran r = Run({"--env", "A=1", "--", "/usr/bin/env"});
  ::unsetenv("CORDON_TEST_SECRET_TOKEN");
  EXPECT_EQ(r.out, "A=1\n");
}

TEST_F(CliTest, ATimedOutGrandchildIsDead) {
  std::string pidfile = work_ / "gc.pid";
  // Host pids and a host path: the foundation's mechanics (isolated runs:
  // escape_test.cc).
  Ran r = Run({"--isolation", "none", "--timeout", "0.3", "--json", "--shell",
               "sleep 60 & echo $! > " + pidfile + "; sleep 60"});
  EXPECT_EQ(r.status, 124);
  json j = r.Json();
  EXPECT_EQ(j["outcome"], "timed_out");
  EXPECT_EQ(j["timed_out"], true);
  EXPECT_EQ(j["release"]["dead"], true);
  EXPECT_TRUE(j["release"]["survivors"].empty());
  auto pid = ReadPidFile(pidfile);
  ASSERT_TRUE(pid);
  EXPECT_TRUE(Exited(*pid));
}

TEST_F(CliTest, AGigabyteOfOutputKeepsTheSupervisorSmall) {
  Ran r = Run({"--output-limit", "16", "--json", "--", "/usr/bin/head", "-c", "1G", "/dev/zero"});
  ASSERT_EQ(r.status, 0) << r.err;
  json j = r.Json();
  EXPECT_EQ(j["stdout_bytes"], int64_t{1} << 30);
  EXPECT_EQ(j["stdout_truncated"], true);
  EXPECT_EQ(j["stdout"].get<std::string>().size(), 16u);
  // ru_maxrss is in KiB: far below the gigabyte that went through.
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer's shadow memory and quarantine (make asan) weigh more
  // than what cordon itself holds; the gigabyte would still be far above.
  constexpr long kMaxRssKiB = 192 * 1024;
#else
  constexpr long kMaxRssKiB = 64 * 1024;
#endif
  EXPECT_LT(r.usage.ru_maxrss, kMaxRssKiB) << "max RSS " << r.usage.ru_maxrss << " KiB";
}

TEST_F(CliTest, ALeftoverHoldingStdoutDoesNotHoldTheRun) {
  auto start = std::chrono::steady_clock::now();
  Ran r = Run({"--timeout", "30", "--shell", "sleep 60 & echo started"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "started\n");
}

TEST_F(CliTest, CtrlCCancelsAndTearsDown) {
  std::string pidfile = work_ / "gc.pid";
  Cordon c(RunArgs({"--isolation", "none", "--json", "--shell",
                    "sleep 60 & echo $! > " + pidfile + "; sleep 60"}));
  auto pid = ReadPidFile(pidfile);
  ASSERT_TRUE(pid);
  ::kill(c.pid(), SIGINT);
  Ran r = c.Wait();
  EXPECT_EQ(r.status, 128 + SIGINT);
  json j = r.Json();
  EXPECT_EQ(j["outcome"], "cancelled");
  EXPECT_EQ(j["release"]["dead"], true);
  EXPECT_TRUE(Exited(*pid));
}

// Without --json, what the exit status (130) alone does not say: that the
// run was cancelled, and that its tree is gone.
TEST_F(CliTest, TheSignalThatCancelledARunIsNamedOnStderrAndInTheJson) {
  std::string pidfile = work_ / "main.pid";
  Cordon c(RunArgs({"--isolation", "none", "--shell", "echo $$ > " + pidfile + "; sleep 60"}));
  ASSERT_TRUE(ReadPidFile(pidfile));
  ::kill(c.pid(), SIGINT);
  Ran r = c.Wait();
  EXPECT_EQ(r.status, 128 + SIGINT);
  EXPECT_NE(r.err.find("cordon run: cancelled by SIGINT; the tree was torn down with SIGTERM"),
            std::string::npos)
      << r.err;

  // With --json, the result says so.
  Cordon j(RunArgs(
      {"--json", "--isolation", "none", "--shell", "echo $$ > " + pidfile + ".json; sleep 60"}));
  ASSERT_TRUE(ReadPidFile(pidfile + ".json"));
  ::kill(j.pid(), SIGTERM);
  Ran rj = j.Wait();
  EXPECT_EQ(rj.status, 128 + SIGTERM);
  json result = json::parse(rj.out);
  EXPECT_EQ(result["outcome"], "cancelled");
  EXPECT_EQ(result["cancelled_by"], "SIGTERM");
  EXPECT_EQ(result["release"]["dead"], true);
}

// Before, any signal that ends a process but INT, TERM and HUP killed
// cordon itself: the tree ran on and its grant stayed active until a reap.
TEST_F(CliTest, EverySignalThatWouldEndCordonCancelsTheRunInstead) {
  for (int sig : {SIGUSR1, SIGUSR2, SIGALRM, SIGQUIT, SIGRTMIN + 2}) {
    std::string pidfile = work_ / ("gc." + std::to_string(sig));
    Cordon c(RunArgs({"--json", "--isolation", "none", "--shell",
                      "sleep 60 & echo $! > " + pidfile + "; sleep 60"}));
    auto grandchild = ReadPidFile(pidfile);
    ASSERT_TRUE(grandchild) << sig;
    ::kill(c.pid(), sig);
    Ran r = c.Wait();
    EXPECT_EQ(r.status, 128 + sig) << sig;
    json result = json::parse(r.out);
    EXPECT_EQ(result["outcome"], "cancelled") << sig;
    EXPECT_EQ(result["cancelled_by"],
              sig == SIGRTMIN + 2 ? "SIGRTMIN+2" : "SIG" + std::string(::sigabbrev_np(sig)));
    EXPECT_EQ(result["release"]["dead"], true) << sig;
    EXPECT_TRUE(Exited(*grandchild)) << sig;
  }
}

TEST_F(CliTest, AKilledSupervisorsTreeIsReaped) {
  if (std::string why = NoTreeWithoutIsolation(); !why.empty()) GTEST_SKIP() << why;
  std::string pidfile = work_ / "gc.pid";
  Cordon c(RunArgs(
      {"--isolation", "none", "--shell", "setsid sleep 60 & echo $! > " + pidfile + "; sleep 60"}));
  auto grandchild = ReadPidFile(pidfile);
  ASSERT_TRUE(grandchild);
  // The supervisor records the main process's identity while the child
  // sets itself up; a command without isolation can be running (its pid
  // file written) before that commit, and under load it was. The kill
  // below is meant for a supervisor whose launch is on record.
  json active;
  for (int i = 0; i < 400 && !(active.size() == 1 && active[0]["identity"].contains("pid")); ++i) {
    if (i > 0) ::usleep(25'000);
    Ran grants = Admin({"grants", "--json"});
    ASSERT_EQ(grants.status, 0) << grants.err;
    active = json::parse(grants.out);
  }
  ::kill(c.pid(), SIGKILL);
  EXPECT_EQ(c.Wait().status, 128 + SIGKILL);
  EXPECT_FALSE(Exited(*grandchild));  // the orphaned tree lives on...

  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0]["state"], "active");
  for (const char* key : {"pid", "ppid", "start_ticks", "boot_id"}) {
    EXPECT_TRUE(active[0]["identity"].contains(key)) << key;
  }

  // Pruning forgets only what was released: the active grant stays, old
  // as it is, for reap.
  Ran pruned = Admin({"grants", "--prune", "1ms", "--json"});
  ASSERT_EQ(pruned.status, 0) << pruned.err;
  EXPECT_EQ(json::parse(pruned.out)["pruned"], 0);
  EXPECT_EQ(json::parse(Admin({"grants", "--json"}).out).size(), 1u);

  Ran reap = Admin({"reap", "--json"});
  EXPECT_EQ(reap.status, 0) << reap.err;
  json reports = json::parse(reap.out);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0]["action"], "reaped");
  EXPECT_EQ(reports[0]["release"]["dead"], true);
  EXPECT_TRUE(Exited(*grandchild));  // ...until reap
  EXPECT_EQ(json::parse(Admin({"grants", "--json"}).out).size(), 0u);
  Ran all = Admin({"grants", "--all", "--json"});
  EXPECT_EQ(json::parse(all.out)[0]["state"], "released");
  Ran again = Admin({"reap"});
  EXPECT_EQ(again.status, 0);
  EXPECT_NE(again.out.find("nothing to reap"), std::string::npos);
}

TEST_F(CliTest, PruneForgetsReleasedGrantsOnlyOnceTheyAreOldEnough) {
  ASSERT_EQ(Run({"--isolation", "none", "--", "/bin/true"}).status, 0);
  ASSERT_EQ(Run({"--isolation", "none", "--", "/bin/true"}).status, 0);
  auto all = [&] { return json::parse(Admin({"grants", "--all", "--json"}).out).size(); };
  ASSERT_EQ(all(), 2u);
  // Bad values are refused before anything is touched.
  for (const char* bad : {"0", "1w", "-5s", "soon"}) {
    Ran r = Admin({"grants", "--prune", bad});
    EXPECT_EQ(r.status, 125) << bad;
    EXPECT_NE(r.err.find("--prune"), std::string::npos) << r.err;
  }
  EXPECT_NE(Admin({"grants", "--prune", "1d", "--all"}).status, 0);
  EXPECT_EQ(all(), 2u);
  // Released just now: younger than an hour, so kept.
  Ran young = Admin({"grants", "--prune", "1h"});
  EXPECT_EQ(young.status, 0) << young.err;
  EXPECT_NE(young.out.find("forgot 0 released grants"), std::string::npos) << young.out;
  EXPECT_EQ(all(), 2u);
  ::usleep(50'000);
  Ran old = Admin({"grants", "--prune", "10ms", "--json"});
  ASSERT_EQ(old.status, 0) << old.err;
  EXPECT_EQ(json::parse(old.out)["pruned"], 2);
  EXPECT_EQ(all(), 0u);
}

// As an ordinary user: no cgroup is writable, so without isolation the
// tree is a process group (degraded), and a memory limit is refused unless
// permissive. (With isolation the pid namespace holds the tree:
// escape_test.cc.)
class UnprivilegedCliTest : public CliTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to an unprivileged user";
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv is not installed";
    if (::access(CORDON_BINARY, R_OK | X_OK) != 0) GTEST_SKIP() << "binary unreadable";
    ::chmod(state_.path().c_str(), 0777);
  }
  Ran AsNobody(std::vector<std::string> rest) {
    std::vector<std::string> a = {"run", "--state-dir", state_ / "nobody"};
    a.insert(a.end(), rest.begin(), rest.end());
    return Cordon(a, "",
                  {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                   "--inh-caps=-all"})
        .Wait();
  }
};

TEST_F(UnprivilegedCliTest, TheTreeIsDegradedAndSaysWhy) {
  Ran r = AsNobody({"--isolation", "none", "--json", "--", "/usr/bin/id", "-u"});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  json j = r.Json();
  EXPECT_EQ(j["stdout"], "65534\n");
  EXPECT_EQ(j["grant"]["mechanisms"]["process_tree"], "process_group");
  bool degraded = false;
  for (const auto& d : j["grant"]["degraded"]) {
    if (d["capability"] == "process_tree") {
      degraded = true;
      EXPECT_NE(d["reason"].get<std::string>().find("setsid"), std::string::npos);
    }
  }
  EXPECT_TRUE(degraded);
  EXPECT_EQ(j["release"]["dead"], true);
  EXPECT_EQ(j["release"]["method"], "process_group");
}

TEST_F(UnprivilegedCliTest, AMemoryLimitIsRefusedUnlessPermissive) {
  Ran refused = AsNobody({"--memory", "64M", "--", "/bin/true"});
  EXPECT_EQ(refused.status, 125);
  EXPECT_NE(refused.err.find("memory"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--permissive"), std::string::npos) << refused.err;
  Ran permissive = AsNobody({"--memory", "64M", "--permissive", "--json", "--", "/bin/true"});
  ASSERT_EQ(permissive.status, 0) << permissive.err;
  bool memory_degraded = false;
  json j = permissive.Json();
  for (const auto& d : j["grant"]["degraded"]) {
    memory_degraded |= d["capability"] == "memory";
  }
  EXPECT_TRUE(memory_degraded) << permissive.out;
  EXPECT_EQ(
      AsNobody({"--isolation", "none", "--require", "process_tree", "--", "/bin/true"}).status,
      125);
  // With isolation (the default) the pid namespace holds the tree, where
  // one can be made (not with user namespaces switched off).
  const bool namespaces = TestProbe().isolation.namespaces.available;
  EXPECT_EQ(AsNobody({"--require", "process_tree", "--", "/bin/true"}).status,
            namespaces ? 0 : 125);
}

TEST_F(UnprivilegedCliTest, AProcessLimitIsEnforcedThroughRlimitNproc) {
  Ran r = AsNobody({"--isolation", "none", "--pids", "20", "--json", "--",
                    CORDON_HELPERS_DIR "/fork_loop", "500"});
  ASSERT_EQ(r.status, 0) << r.err;
  json j = r.Json();
  EXPECT_EQ(j["grant"]["mechanisms"]["process_count"], "rlimit");
  int forked = -1;
  ASSERT_EQ(std::sscanf(j["stdout"].get<std::string>().c_str(), "forked %d", &forked), 1);
  EXPECT_LT(forked, 20);
}

// Root where no user namespace can be made for a sandbox. Simulated as a
// container's /proc makes it: with a path of /proc masked by a mount over
// it, the kernel refuses a sandbox a /proc of its own, so the probe finds
// namespaces unusable, while the caller stays the host's root. Its
// sandbox must not run as uid 0 then (the host matrix's no-userns cell
// found /proc/sys/kernel/core_pattern writable to it): it runs as a
// leased uid of its own, with no groups.
class RootWithoutNamespacesCliTest : public CliTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs the host's root";
    for (const char* tool : {"/usr/bin/unshare", "/usr/bin/mount"}) {
      if (::access(tool, X_OK) != 0) GTEST_SKIP() << tool << " is not installed";
    }
    for (const char* p : {"/proc/kcore", "/proc/timer_list", "/proc/keys"}) {
      if (::access(p, F_OK) == 0) masked_ = p;
    }
    if (masked_.empty()) GTEST_SKIP() << "no /proc file to mask here";
    json privileges = Privileges();
    if (privileges.is_null()) GTEST_SKIP() << "namespaces are usable despite the masked /proc";
    if (!TestProbe().isolation.map_ids)
      GTEST_SKIP() << "this root cannot give a sandbox a uid of its own";
  }
  // In a mount namespace of its own, with `masked_` covered; and with
  // `without_sys_admin_`, as a container's root: CAP_SYS_ADMIN out of the
  // bounding set (podman's and Docker's defaults leave it out).
  std::vector<std::string> Prefix() const {
    const std::string then =
        without_sys_admin_ ? "exec /usr/bin/setpriv --bounding-set -sys_admin " : "exec ";
    return {"/usr/bin/unshare",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            "mount --bind /dev/null " + masked_ + " && " + then + "\"$0\" \"$@\""};
  }
  // The probe's privileges, where it finds namespaces unusable; else null.
  json Privileges() {
    Ran probe = Cordon({"probe", "--json", "--cgroup-root", CgroupRoot()}, "", Prefix()).Wait();
    json j = json::parse(probe.out, nullptr, false);
    if (j.is_discarded() || j["isolation"]["namespaces"] != false) return nullptr;
    for (const json& c : j["capabilities"]) {
      if (c["capability"] == "privileges") return c;
    }
    return nullptr;
  }
  std::string masked_;
  bool without_sys_admin_ = false;
};

// A container's root has no CAP_SYS_ADMIN, and Landlock then needs
// no_new_privs before the domain (podman's default container found it).
TEST_F(RootWithoutNamespacesCliTest, AContainersRootWithoutSysAdminRunsItsSandboxAsALeasedUid) {
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "/usr/bin/setpriv is not installed";
  without_sys_admin_ = true;
  Ran r = Cordon(RunArgs({"--json", "--shell",
                          "id -u; grep ^CapEff /proc/self/status; "
                          "test -w /proc/sys/kernel/core_pattern && echo writable || echo kept"}),
                 "", Prefix())
              .Wait();
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  json j = r.Json();
  EXPECT_EQ(j["grant"]["mechanisms"]["privileges"], "leased_uid+no_new_privs") << j;
  EXPECT_EQ(j["grant"]["mechanisms"]["filesystem"], "landlock") << j;
  std::istringstream lines(j["stdout"].get<std::string>());
  std::string uid, caps, core_pattern;
  std::getline(lines, uid);
  std::getline(lines, caps);
  std::getline(lines, core_pattern);
  ASSERT_FALSE(uid.empty()) << j;
  EXPECT_GE(std::stoul(uid), contain::kDefaultIdRange.first) << j;
  EXPECT_EQ(caps, "CapEff:\t0000000000000000") << j;
  EXPECT_EQ(core_pattern, "kept") << j;
}

TEST_F(RootWithoutNamespacesCliTest, TheSandboxRunsAsALeasedUidAndRootsFilesStayRoots) {
  json privileges = Privileges();
  EXPECT_EQ(privileges["enforceable"], true) << privileges;
  EXPECT_EQ(privileges["mechanism"], "leased_uid+no_new_privs") << privileges;

  // Beneath a directory of root's that the sandbox's uid cannot enter (as a
  // daemon's workspaces are): the sandbox is let in by its supervisor.
  const std::string closed = work_ / "closed", workspace = work_ / "closed/workspace";
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(workspace.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(workspace.c_str(), 01777), 0);
  Ran r = Cordon(RunArgs({"--workspace", workspace, "--json", "--shell",
                          "id -u; id -g; id -G; "
                          "test -w /proc/sys/kernel/core_pattern && echo writable || echo kept; "
                          "echo x > made && stat -c %u made"}),
                 "", Prefix())
              .Wait();
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  json j = r.Json();
  EXPECT_EQ(j["grant"]["mechanisms"]["privileges"], "leased_uid+no_new_privs") << j;
  std::istringstream lines(j["stdout"].get<std::string>());
  std::string uid, gid, groups, core_pattern, owner;
  std::getline(lines, uid);
  std::getline(lines, gid);
  std::getline(lines, groups);
  std::getline(lines, core_pattern);
  std::getline(lines, owner);
  const contain::IdRange range = contain::kDefaultIdRange;
  ASSERT_FALSE(uid.empty()) << j;
  EXPECT_GE(std::stoul(uid), range.first) << j;
  EXPECT_LT(std::stoul(uid), uint64_t{range.first} + range.count) << j;
  EXPECT_EQ(gid, uid);
  EXPECT_EQ(groups, gid) << "no supplementary group of root's is kept";
  EXPECT_EQ(core_pattern, "kept");
  EXPECT_EQ(owner, uid) << "what the sandbox makes is its uid's on the host";
  bool said = false;
  for (const json& w : j["warnings"]) {
    said |= w.get<std::string>().find("no user namespace: the sandbox runs as uid " + uid) !=
            std::string::npos;
  }
  EXPECT_TRUE(said) << j["warnings"];
  EXPECT_EQ(j["release"]["dead"], true);

  // A directory of root's, mode 0755: the sandbox may read it, not write.
  ASSERT_EQ(::chmod(workspace.c_str(), 0755), 0);
  Ran refused =
      Cordon(RunArgs({"--workspace", workspace, "--json", "--shell", "cat made && echo y > other"}),
             "", Prefix())
          .Wait();
  json k = json::parse(refused.out, nullptr, false);
  ASSERT_FALSE(k.is_discarded()) << refused.err;
  EXPECT_EQ(k["stdout"], "x\n");
  EXPECT_NE(k["exit_code"], 0);
  EXPECT_NE(k["stderr"].get<std::string>().find("Permission denied"), std::string::npos) << k;
  EXPECT_FALSE(std::filesystem::exists(workspace + "/other"));
}

}  // namespace
}  // namespace cordon::testing
