// Landlock: the filesystem policy once more, enforced by the kernel on the
// paths the sandbox sees (defence in depth behind the mount view), and the
// only filesystem mechanism where no mount namespace can be made. Rules
// name paths as the child sees them; the child opens them itself, after
// pivot_root, so no descriptor of the host's view is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cordon::contain {

// The Landlock ABI version this kernel offers; 0 when it has none (or it
// is disabled). ABI 4 adds TCP rules, 6 scopes signals and abstract sockets.
int LandlockAbi();

enum class LandlockAccess {
  kReadExec,   // read and execute files, list directories
  kReadWrite,  // everything: create, write, remove, rename
  kDevices,    // read and write device files (/dev), no creation
  kProcFs,     // read /proc, write its files (/proc/self/...)
  kList,       // list the directory itself (the root of the view)
};

// Child side: plain data only.
struct LandlockRule {
  const char* path;
  uint64_t access;
};
struct LandlockPlan {
  uint64_t handled_fs = 0;
  uint64_t handled_net = 0;  // TCP bind/connect refused (no rule allows any)
  uint64_t scoped = 0;       // signals and abstract sockets stay inside the domain
  size_t attr_size = 0;      // of struct landlock_ruleset_attr for this ABI
  const LandlockRule* rules = nullptr;
  size_t rule_count = 0;
  int exec_fd = -1;  // a verified file to execute: allowed itself
};

// Parent side: collects the rules and owns their strings.
class LandlockPolicy final {
 public:
  // `abi` >= 1. `refuse_tcp`: no TCP at all (ABI 4+); used where no network
  // namespace could be made.
  LandlockPolicy(int abi, bool refuse_tcp);
  LandlockPolicy(const LandlockPolicy&) = delete;
  LandlockPolicy& operator=(const LandlockPolicy&) = delete;

  void Allow(const std::string& path, LandlockAccess access);
  void AllowExecFd(int fd) { plan_.exec_fd = fd; }
  // Valid until the policy is changed or destroyed.
  const LandlockPlan* plan();

 private:
  std::vector<std::string> paths_;
  std::vector<uint64_t> access_;
  std::vector<LandlockRule> rules_;
  LandlockPlan plan_;
};

// Child side, async-signal-safe: builds the ruleset (a path that does not
// exist is skipped) and restricts this process. Needs no_new_privs first.
// Returns 0 or an errno value.
int ApplyLandlock(const LandlockPlan* plan);

}  // namespace cordon::contain
