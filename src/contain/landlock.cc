#include "contain/landlock.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace cordon::contain {
namespace {

// Rights newer than the system headers (Linux 6.1) know; values from the
// kernel's uapi/linux/landlock.h.
constexpr uint64_t kFsExecute = 1ULL << 0;
constexpr uint64_t kFsWriteFile = 1ULL << 1;
constexpr uint64_t kFsReadFile = 1ULL << 2;
constexpr uint64_t kFsReadDir = 1ULL << 3;
constexpr uint64_t kFsAbi1 = (1ULL << 13) - 1;  // execute .. make_sym
constexpr uint64_t kFsRefer = 1ULL << 13;       // ABI 2
constexpr uint64_t kFsTruncate = 1ULL << 14;    // ABI 3
constexpr uint64_t kFsIoctlDev = 1ULL << 15;    // ABI 5
constexpr uint64_t kFileRights =
    kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;
constexpr uint64_t kNetBindTcp = 1ULL << 0;         // ABI 4
constexpr uint64_t kNetConnectTcp = 1ULL << 1;      // ABI 4
constexpr uint64_t kScopeAbstractUnix = 1ULL << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ULL << 1;        // ABI 6

// struct landlock_ruleset_attr as of ABI 6; older kernels take a prefix.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

uint64_t HandledFs(int abi) {
  uint64_t fs = kFsAbi1;
  if (abi >= 2) fs |= kFsRefer;
  if (abi >= 3) fs |= kFsTruncate;
  if (abi >= 5) fs |= kFsIoctlDev;
  return fs;
}

uint64_t Rights(LandlockAccess a, uint64_t handled) {
  switch (a) {
    case LandlockAccess::kReadExec:
      return kFsExecute | kFsReadFile | kFsReadDir;
    case LandlockAccess::kReadWrite:
      return handled;
    case LandlockAccess::kDevices:
      return (kFsReadFile | kFsWriteFile | kFsReadDir | kFsTruncate | kFsIoctlDev) & handled;
    case LandlockAccess::kProcFs:
      return kFsReadFile | kFsReadDir | kFsWriteFile;
    case LandlockAccess::kList:
      return kFsReadDir;
  }
  return 0;
}

}  // namespace

int LandlockAbi() {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

LandlockPolicy::LandlockPolicy(int abi, bool refuse_tcp) {
  plan_.handled_fs = HandledFs(abi);
  plan_.attr_size = sizeof(uint64_t);
  if (abi >= 4) {
    plan_.attr_size = 2 * sizeof(uint64_t);
    if (refuse_tcp) plan_.handled_net = kNetBindTcp | kNetConnectTcp;
  }
  if (abi >= 6) {
    plan_.attr_size = sizeof(RulesetAttr);
    plan_.scoped = kScopeAbstractUnix | kScopeSignal;
  }
}

void LandlockPolicy::Allow(const std::string& path, LandlockAccess access) {
  paths_.push_back(path);
  access_.push_back(Rights(access, plan_.handled_fs));
}

const LandlockPlan* LandlockPolicy::plan() {
  rules_.clear();
  for (size_t i = 0; i < paths_.size(); ++i) rules_.push_back({paths_[i].c_str(), access_[i]});
  plan_.rules = rules_.data();
  plan_.rule_count = rules_.size();
  return &plan_;
}

int ApplyLandlock(const LandlockPlan* plan) {
  if (plan == nullptr) return 0;
  RulesetAttr attr = {plan->handled_fs, plan->handled_net, plan->scoped};
  int ruleset = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, plan->attr_size, 0));
  if (ruleset < 0) return errno;
  auto add = [&](int fd, uint64_t access) -> int {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno;
    // A rule on a file may only carry rights that apply to files.
    if (!S_ISDIR(st.st_mode)) access &= kFileRights;
    PathBeneathAttr beneath = {access & plan->handled_fs, fd};
    if (beneath.allowed_access == 0) return 0;
    return ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) == 0
               ? 0
               : errno;
  };
  int err = 0;
  for (size_t i = 0; i < plan->rule_count && err == 0; ++i) {
    int fd = ::open(plan->rules[i].path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT) err = errno;
      continue;
    }
    err = add(fd, plan->rules[i].access);
    ::close(fd);
  }
  if (err == 0 && plan->exec_fd >= 0) err = add(plan->exec_fd, kFsExecute | kFsReadFile);
  if (err == 0 && ::syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) err = errno;
  ::close(ruleset);
  return err;
}

}  // namespace cordon::contain
