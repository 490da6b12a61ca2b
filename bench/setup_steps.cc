// Where a sandboxed launch spends its time, step by step: each step of the
// supervisor timed on its own, and the child's setup measured by
// difference (the same launch with one mechanism left out, the variants
// taking turns). Medians of RUNS iterations (default 200).
// Usage: cordon_setup_steps [RUNS]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "contain/id_lease.h"
#include "contain/landlock.h"
#include "contain/launch.h"
#include "contain/namespaces.h"
#include "contain/probe.h"
#include "contain/sandbox.h"
#include "contain/seccomp.h"
#include "store/store.h"

using namespace cordon;
using Clock = std::chrono::steady_clock;

double MedianUs(int runs, const std::function<void()>& step) {
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    step();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void Row(const char* what, double us) { std::printf("%-58s %8.0f us\n", what, us); }

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 200;
  char dir_template[] = "/tmp/cordon-steps.XXXXXX";
  std::string dir = ::mkdtemp(dir_template);
  contain::IsolationSpec iso;
  auto probe = contain::ProbeHost({});
  if (!probe) return 1;
  const contain::IsolationSupport& support = probe->isolation;

  std::printf("supervisor steps (median of %d)\n", runs);
  Row("probe: whole (cgroups, namespaces, Landlock, seccomp)",
      MedianUs(runs, [] { (void)contain::ProbeHost({}); }));
  Row("probe: a user namespace made (namespaces available?)",
      MedianUs(runs, [] { (void)contain::ProbeNamespaces(); }));
  Row("probe: Landlock ABI", MedianUs(runs, [] { (void)contain::LandlockAbi(); }));
  Row("seccomp: compile the filter (libseccomp)",
      MedianUs(runs, [] { (void)contain::SeccompFilter::Build({}); }));
  Row("id lease: flock one id of the range", MedianUs(runs, [&] {
        (void)contain::IdLease::Acquire(dir + "/ids", contain::kDefaultIdRange);
      }));
  contain::SandboxRequest request;
  request.spec = &iso;
  request.workspace = dir;
  request.namespaces = support.namespaces.available;
  request.seccomp = support.seccomp;
  request.landlock_abi = support.landlock_abi;
  request.outside_uid = ::getuid();
  request.outside_gid = ::getgid();
  Row("sandbox: prepare (mount plan, Landlock rules, seccomp)",
      MedianUs(runs, [&] { (void)contain::Sandbox::Prepare(request); }));

  // Whole launches of /bin/true, from clone3 until the command has exited
  // and the main process is reaped. The variants take turns, one launch
  // each per round: network namespaces are freed by the kernel in the
  // background, and a long run of them slows everything that follows, so
  // variants measured one after the other would not be comparable.
  struct Variant {
    const char* what;
    std::optional<contain::Sandbox> sandbox;  // none: no isolation
    std::vector<double> us;
  };
  std::vector<Variant> variants;
  variants.push_back({"no isolation", std::nullopt, {}});
  auto add = [&](const char* what, auto change) {
    contain::IsolationSpec spec;
    contain::SandboxRequest r = request;
    change(spec, r);
    r.spec = &spec;
    auto sandbox = contain::Sandbox::Prepare(r);
    if (!sandbox) std::abort();
    variants.push_back({what, std::move(*sandbox), {}});
  };
  add("Landlock + seccomp + no privileges, no namespaces",
      [](auto&, contain::SandboxRequest& r) { r.namespaces = false; });
  add("namespaces but the network one, mounts, all the rest",
      [](contain::IsolationSpec& s, auto&) { s.network = contain::Network::kHost; });
  add("standard: all namespaces, mounts, Landlock, seccomp", [](auto&, auto&) {});
  add("standard without Landlock", [](auto&, contain::SandboxRequest& r) { r.landlock_abi = 0; });
  add("standard without seccomp", [](auto&, contain::SandboxRequest& r) { r.seccomp = false; });
  add("standard without the secrets covered in /etc",
      [](contain::IsolationSpec& s, auto&) { s.hidden_paths = {}; });
  add("standard with only /usr shown (no /etc, no links)", [](contain::IsolationSpec& s, auto&) {
    s.system_dirs = {"/usr"};
    s.hidden_paths = {};
  });
  for (int i = 0; i < runs; ++i) {
    for (Variant& v : variants) {
      auto start = Clock::now();
      contain::LaunchRequest r;
      r.argv = {"/bin/true"};
      r.sandbox = v.sandbox ? &*v.sandbox : nullptr;
      auto l = contain::Launch(r);
      if (!l) std::abort();
      (void)l->pidfd.Reap();
      v.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  }
  std::printf("\nlaunch of /bin/true until reaped (median of %d, variants interleaved)\n", runs);
  for (Variant& v : variants) {
    std::sort(v.us.begin(), v.us.end());
    Row(v.what, v.us[v.us.size() / 2]);
  }
  std::string rm = "rm -rf " + dir;
  return std::system(rm.c_str()) == 0 ? 0 : 1;
}
