// The escape suite's fixture, shared by its files (escape_test.cc and the
// files of issue 13's classes): a sandbox run as root, as nobody, and as
// nobody on a restricted host, with a planted host secret, a workspace and
// a state directory, and the probe tests/helpers/try-syscall.c.
//
// A file that adds cases derives its own suite from EscapeTest and
// instantiates it over kCallers, so that each case runs once per caller.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cordon_process.h"
#include "proc/stat.h"
#include "support.h"

namespace cordon::testing {

using nlohmann::json;

enum class Caller { kRoot, kNobody, kRestricted };

inline const auto kCallers = ::testing::Values(Caller::kRoot, Caller::kNobody, Caller::kRestricted);

inline std::string CallerName(const ::testing::TestParamInfo<Caller>& info) {
  switch (info.param) {
    case Caller::kRoot:
      return "Root";
    case Caller::kNobody:
      return "Nobody";
    case Caller::kRestricted:
      return "RestrictedHost";
  }
  return "Unknown";
}

inline std::string Token() {
  std::random_device rd;
  return "tok" + std::to_string(rd()) + std::to_string(rd());
}

// Processes on the host whose command line contains `marker` (observed
// only, never signalled: the test signals nothing it did not start).
inline std::vector<pid_t> LiveProcessesWith(const std::string& marker) {
  std::vector<pid_t> found;
  auto pids = proc::ListPids();
  if (!pids) return found;
  for (pid_t pid : *pids) {
    std::string cmdline = Slurp("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos && !Exited(pid)) found.push_back(pid);
  }
  return found;
}

class EscapeTest : public ::testing::TestWithParam<Caller> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the suite switches users: run it as root";
    if (GetParam() != Caller::kRoot && ::access("/usr/bin/setpriv", X_OK) != 0) {
      GTEST_SKIP() << "setpriv is not installed";
    }
    if (GetParam() == Caller::kRestricted && ::access("/usr/bin/unshare", X_OK) != 0) {
      GTEST_SKIP() << "unshare is not installed";
    }
    if (GetParam() == Caller::kRestricted && !TestProbe().isolation.namespaces.available) {
      GTEST_SKIP() << "the restricted host is simulated in a user namespace (unshare --user), "
                      "which this host refuses: here the Root and Nobody cases are the restricted "
                      "ones ("
                   << TestProbe().isolation.namespaces.problem << ")";
    }
    // The workspace as the issue has it: created by the test; owned by
    // root (mode 0755) for a root caller, by the caller otherwise.
    ::chmod(host_.path().c_str(), 0755);
    ::chmod(state_.path().c_str(), 0777);
    if (GetParam() != Caller::kRoot) {
      ASSERT_EQ(::chown(work_.path().c_str(), 65534, 65534), 0);
    }
    ::chmod(work_.path().c_str(), 0755);
    // On a kernel that cannot idmap it (tmpfs before 6.3, anything before
    // 5.12), the sandbox reaches the workspace as an outside uid of its
    // own, which a 0755 directory of someone else's keeps out: the
    // workspace is opened to it as an operator of such a host must
    // (docs/hosts.md). IdmappedWorkspaceTest checks the refusal itself. So
    // does the uid of its own that root's sandbox runs as where no user
    // namespace can be made (RootWithoutNamespacesCliTest).
    if (!KernelIdmaps(work_.path()) ||
        (GetParam() == Caller::kRoot && TestProbe().SandboxesRunAsOwnUids())) {
      ::chmod(work_.path().c_str(), 0777);
    }
    // A secret the sandbox must not reach: readable by anyone on the host,
    // so only the boundary stands between it and the command.
    secret_ = Token();
    secret_path_ = host_ / "secret.txt";
    std::ofstream(secret_path_) << secret_;
    ::chmod(secret_path_.c_str(), 0644);
  }

  bool Restricted() const { return GetParam() == Caller::kRestricted; }

  // What the run observed, rather than what the caller was: a real host
  // may refuse namespaces to nobody too.
  static bool Namespaced(const json& j) {
    return j["grant"]["mechanisms"].value("filesystem", "").starts_with("mount_namespace");
  }

  // What `cordon probe`, run as the caller, says of `capability`: its
  // object ("enforceable", "mechanism", "reason"), or null.
  json CallerProbe(const std::string& capability) {
    std::vector<std::string> args = {"probe", "--json"};
    if (GetParam() == Caller::kRoot) {
      args.push_back("--cgroup-root");
      args.push_back(CgroupRoot());
    }
    json probe = json::parse(Cordon(args, "", Prefix()).Wait().out, nullptr, false);
    if (probe.is_discarded()) return nullptr;
    for (const auto& c : probe["capabilities"]) {
      if (c["capability"] == capability) return c;
    }
    return nullptr;
  }

  // Whether the whole tree is held (a cgroup or a pid namespace) for this
  // caller, as `cordon probe` run as the caller says.
  bool TreeHeld() {
    json c = CallerProbe("process_tree");
    return c.is_object() && c["enforceable"] == true;
  }

  // Why this caller gets no filesystem boundary at all (neither a mount
  // namespace nor Landlock: a restricted host before Linux 5.13), or ""
  // where it gets one. A case that needs the boundary is skipped there
  // with this reason; the probe's saying so is what is checked.
  std::string NoFilesystemBoundary() {
    json c = CallerProbe("filesystem");
    EXPECT_TRUE(c.is_object()) << "the probe names no filesystem capability";
    if (!c.is_object() || c["enforceable"] == true) return "";
    std::string reason = c.value("reason", "");
    EXPECT_FALSE(reason.empty()) << c;
    return "no filesystem boundary for this caller on this host: " + reason;
  }

  std::vector<std::string> Prefix() const {
    std::vector<std::string> p;
    if (GetParam() == Caller::kRoot) return p;
    p = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"};
    if (Restricted()) {
      // LINUX-NOTES.md, "Simulating a restricted host".
      for (const char* a : {"/usr/bin/unshare", "--user", "--map-root-user", "/bin/sh", "-c",
                            "echo 0 > /proc/sys/user/max_user_namespaces; "
                            "exec setpriv --bounding-set=-all --inh-caps=-all -- \"$0\" \"$@\""}) {
        p.push_back(a);
      }
    }
    return p;
  }

  // The arguments of `cordon run --json` of `script` (sh -c) in the
  // workspace, with `options`, in the state directory `state` (default:
  // the fixture's), and a 60 s --timeout unless `options` gives one.
  std::vector<std::string> RunArgs(const std::string& script,
                                   const std::vector<std::string>& options,
                                   const std::string& state = "") const {
    std::vector<std::string> args = {"run",    "--state-dir", state.empty() ? state_ / "s" : state,
                                     "--json", "--workspace", work_.path()};
    if (std::find(options.begin(), options.end(), "--timeout") == options.end()) {
      args.push_back("--timeout");  // a bound on every attempt
      args.push_back("60");
    }
    if (GetParam() == Caller::kRoot) {
      args.push_back("--cgroup-root");
      args.push_back(CgroupRoot());
    }
    args.insert(args.end(), options.begin(), options.end());
    args.push_back("--shell");
    args.push_back(script);
    return args;
  }

  // `cordon run --json` of `script` (sh -c) in the workspace.
  Ran Sandboxed(const std::string& script, std::vector<std::string> options = {}) {
    return Cordon(RunArgs(script, options), "", Prefix()).Wait();
  }

  // The run's JSON result; fails the test when there is none.
  json Result(const Ran& r) {
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "no JSON result: " << r.out << r.err;
    if (j.is_discarded()) return json::object();
    EXPECT_EQ(j["release"]["dead"], true) << r.out;
    return j;
  }

  // Whether `capability` was enforced; if not, it must be listed degraded
  // with a reason (never silently missing).
  bool Enforced(const json& j, const std::string& capability) {
    for (const auto& c : j["grant"]["enforced"]) {
      if (c == capability) return true;
    }
    bool degraded = false;
    for (const auto& d : j["grant"]["degraded"]) {
      if (d["capability"] == capability) {
        degraded = true;
        EXPECT_FALSE(d["reason"].get<std::string>().empty());
      }
    }
    EXPECT_TRUE(degraded) << capability << " is neither enforced nor degraded: " << j["grant"];
    return false;
  }

  // What try-syscall (tests/helpers/try-syscall.c) reported for each
  // call it was given, run under `level`; `open` holds its "open F T P"
  // and "socketpair F T" lines. A refused call is judged by the errno the
  // probe returns, which the filter (or the kernel) decides, not the
  // probe: the probe only reports it.
  struct Probed {
    json result;
    std::map<std::string, int> err;
    std::vector<std::string> open;
  };
  Probed TrySyscalls(const std::string& level, const std::string& calls,
                     const std::string& before = "") {
    Ran r = Sandboxed(before + "exec " + Helper("try-syscall") + " " + calls,
                      {"--isolation", level, "--ro-bind", CORDON_HELPERS_DIR});
    Probed p;
    p.result = Result(r);
    std::istringstream lines(p.result.value("stdout", ""));
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("open ") || line.starts_with("socketpair ")) {
        p.open.push_back(line);
        continue;
      }
      size_t space = line.rfind(' ');
      if (space == std::string::npos) continue;
      p.err[line.substr(0, space)] = std::atoi(line.c_str() + space + 1);
    }
    EXPECT_FALSE(p.err.empty() && p.open.empty()) << "the probe did not run: " << r.out << r.err;
    EXPECT_TRUE(Enforced(p.result, "syscall_filter"));
    return p;
  }

  TempDir host_;   // host files the sandbox must not see
  TempDir work_;   // the workspace
  TempDir state_;  // cordon's state dir
  std::string secret_;
  std::string secret_path_;
};

// The levels that install a system-call filter. A case that is seccomp's
// promise runs under these only: `--isolation none` installs no filter (it
// promises the boundary of limits and teardown, not a refused call).
inline const char* const kFilteredLevels[] = {"standard", "strict"};

}  // namespace cordon::testing
