#include "support.h"

#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "contain/cgroup_layout.h"
#include "proc/stat.h"
#include "sys/fd.h"

namespace cordon::testing {

TempDir::TempDir() {
  char tmpl[] = "/tmp/cordon-test.XXXXXX";
  const char* made = ::mkdtemp(tmpl);
  if (made == nullptr) std::abort();
  path_ = made;
  // Where a sandbox runs as a uid of its own without a mount namespace, it
  // reaches its workspace by host path: a test's directories let it pass
  // (not list), as an operator's state directory must (cordon serve warns
  // otherwise: state_dir_not_reachable).
  if (TestProbe().SandboxesRunAsOwnUids()) ::chmod(made, 0711);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool Exited(pid_t pid) {
  auto st = proc::ReadStat(pid);
  return !st || st->exited();
}

std::optional<pid_t> ReadPidFile(const std::string& path, std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    // The file is written by a process the test does not control; polling a
    // file has no event to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

int TimeScale() {
  static const int scale = [] {
    const char* v = std::getenv("CORDON_TEST_TIME_SCALE");
    int n = v ? std::atoi(v) : 1;
    return n >= 1 ? n : 1;
  }();
  return scale;
}

bool KernelIdmaps(const std::string& path) {
  struct utsname u {};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  const int version = major * 100 + minor;
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) return version >= 603;
  return version >= 512;
}

bool HaveIpykernel() {
  return ::access("/usr/bin/python3", X_OK) == 0 &&
         std::system("/usr/bin/python3 -c 'import ipykernel' 2>/dev/null") == 0;
}

std::string Helper(const std::string& name) { return std::string(CORDON_HELPERS_DIR) + "/" + name; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string OutputOfChild(const std::function<std::string()>& body) {
  auto pipe = sys::MakePipe();
  if (!pipe) return "";
  pid_t pid = ::fork();
  if (pid < 0) return "";
  if (pid == 0) {
    pipe->read.reset();
    (void)sys::WriteAll(pipe->write.get(), body());
    ::_exit(0);
  }
  pipe->write.reset();
  auto out = sys::ReadAll(pipe->read.get());
  ::waitpid(pid, nullptr, 0);
  return out ? *out : "";
}

const std::string& CgroupRoot() {
  static const std::string root = [] {
    const std::string name = "/cordon-test-" + std::to_string(::getpid());
    if (::geteuid() == 0) return name;
    // An unprivileged user can make groups only beneath one delegated to
    // it: its own, as user@.service delegates (the host matrix's
    // user-delegated cell). Where its own is not its to write, the tests
    // see what such a user sees without delegation.
    auto layout = contain::DiscoverCgroupLayout();
    if (!layout || !layout->v2 || layout->v2->own_dir.empty() ||
        ::access(layout->v2->own_dir.c_str(), W_OK) != 0) {
      return name;
    }
    const std::string& own = layout->v2->own_path;
    return (own == "/" ? "" : own) + name;
  }();
  return root;
}

const contain::Probe& TestProbe() {
  static const contain::Probe probe = [] {
    contain::ProbeOptions options;
    options.cgroups.cgroup_root = CgroupRoot();
    auto p = contain::ProbeHost(options);
    if (!p) std::abort();
    return *p;
  }();
  return probe;
}

bool SandboxNamespaces() { return TestProbe().isolation.namespaces.available; }

std::string NoTreeWithoutIsolation() {
  const contain::CapabilityStatus& tree =
      TestProbe().StatusFor(contain::Capability::kProcessTree, false);
  if (tree.enforceable) return "";
  return "a run without isolation holds no process tree here (" + tree.mechanism +
         "): " + tree.reason;
}

namespace {

// Removes a cgroup directory tree, children first (cgroupfs only allows
// rmdir of an empty group; its control files go with it).
void RemoveCgroupTree(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) RemoveCgroupTree(entry.path());
  }
  ::rmdir(dir.c_str());
}

class CgroupRootEnvironment final : public ::testing::Environment {
 public:
  void TearDown() override {
    auto layout = contain::DiscoverCgroupLayout();
    if (!layout) return;
    std::vector<std::filesystem::path> roots;
    if (layout->v2) roots.emplace_back(layout->v2->mount_point + CgroupRoot());
    for (const auto& [controller, h] : layout->v1) roots.emplace_back(h.mount_point + CgroupRoot());
    // A group whose last process is still being reaped (a kernel or a
    // daemon that has just ended) refuses rmdir for a moment: up to 5 s.
    for (int attempt = 0; attempt < 100; ++attempt) {
      bool left = false;
      for (const auto& root : roots) {
        RemoveCgroupTree(root);
        left |= std::filesystem::exists(root);
      }
      if (!left) return;
      ::usleep(50'000);
    }
  }
};

[[maybe_unused]] ::testing::Environment* const kCgroupRootEnvironment =
    ::testing::AddGlobalTestEnvironment(new CgroupRootEnvironment);

}  // namespace

std::string SanitizerReport(const std::string& log) {
  static constexpr std::string_view kMarkers[] = {
      "ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "AddressSanitizer:DEADLYSIGNAL",
      "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer"};
  size_t first = std::string::npos;
  for (auto marker : kMarkers) first = std::min(first, log.find(marker));
  if (first == std::string::npos) return "";
  size_t line = log.rfind('\n', first);
  return log.substr(line == std::string::npos ? 0 : line + 1, 8192);
}

}  // namespace cordon::testing
