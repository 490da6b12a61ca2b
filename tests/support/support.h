// Small things the tests share: temporary directories, waiting for a file,
// and observing whether a process has died.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "contain/probe.h"

namespace cordon::testing {

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir final {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// True when `pid` has exited: no such process, or a zombie waiting for its
// parent (which for an orphan is the host's init).
bool Exited(pid_t pid);

// Reads a pid written to `path` by a test command, waiting (by polling the
// file, bounded) until it appears: the writer runs in another process.
std::optional<pid_t> ReadPidFile(const std::string& path,
                                 std::chrono::milliseconds within = std::chrono::seconds(10));

// Whether this kernel can idmap a mount of the directory at `path`, judged
// from the kernel's version and the directory's filesystem alone (an
// observation independent of cordon's own attempt): idmapped mounts came
// in 5.12, tmpfs took them in 6.3. Where it cannot, a sandbox reaches a
// caller's directory as an outside uid of its own (docs/hosts.md).
bool KernelIdmaps(const std::string& path);

// How many times slower than a machine like this one the tests' host is:
// $CORDON_TEST_TIME_SCALE, default 1. The host matrix's cells run under
// TCG (tests/hosts/suites.py sets 10 there), where ipykernel's handling of
// an interrupt alone can take seconds. Only bounds that give a runtime
// time to react (graces), or to get its code going before a deadline
// falls, are scaled; never a bound whose breach a test is about.
int TimeScale();

// Debian's python3 with python3-ipykernel, the one the daemon's python
// sessions run, is installed.
bool HaveIpykernel();

// The path of a helper program from tests/helpers.
std::string Helper(const std::string& name);

// The whole content of a file, or "" if it cannot be read.
std::string Slurp(const std::string& path);

// Runs `body` in a forked child (whose namespaces, mounts and memory are
// then its own to change) and returns the text it returned, once the child
// has exited; "" if the child died before writing it.
std::string OutputOfChild(const std::function<std::string()>& body);

// The first sanitizer report (AddressSanitizer, LeakSanitizer,
// UndefinedBehaviorSanitizer) in a process's log, from its first line on;
// empty when there is none. A daemon that wrote one failed its test, even
// if it answered every request.
std::string SanitizerReport(const std::string& log);

// The cgroup path ("/cordon-test-<pid>"; for an unprivileged user with a
// delegated group, beneath that group) under which this test binary's
// cgroups go, in every hierarchy. Registered as a gtest environment that
// removes it (and anything left below it) when the tests end.
const std::string& CgroupRoot();

// The host's probe, with cordon's groups under CgroupRoot().
const contain::Probe& TestProbe();

// Whether sandboxes get namespaces of their own here. Where they cannot
// (user namespaces refused), a sandbox keeps the host's pids, hostname and
// paths: its workspace is where it is on the host.
bool SandboxNamespaces();

// Why a run without isolation holds no process tree here (no writable
// cgroup: an unprivileged user without a delegated group), as the probe
// says; "" where one holds it. A test that needs the tree held skips
// with this reason.
std::string NoTreeWithoutIsolation();

}  // namespace cordon::testing
