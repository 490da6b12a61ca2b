// One cgroup directory, v1 or v2: create, read and write its control files,
// list its processes, remove it. Knows nothing of what a grant puts there.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sys/fd.h"

namespace cordon::contain {

// How a group's processes can all be killed, from the control files it has.
enum class GroupKill {
  // cgroup.kill (v2, Linux 5.14+): SIGKILL to every member at once.
  kCgroupKill,
  // cgroup.freeze (v2, Linux 5.2+): the group is frozen, so that no member
  // runs (nor forks) any more, then each member gets SIGKILL, which ends a
  // frozen process too; repeated until none is left.
  kFreezeKill,
  // Neither (a v1 group, or v2 before 5.2): each member gets SIGKILL as it
  // is found, until none is left.
  kEach,
};

// "cgroup.kill", "cgroup.freeze+kill", "kill_each".
std::string_view GroupKillName(GroupKill kill);

class CgroupDir final {
 public:
  // mkdir(path) and open it; fails with EEXIST if it is already there.
  static sys::Result<CgroupDir> Create(const std::string& path);
  // Opens a group that exists (e.g. one found by reap).
  static sys::Result<CgroupDir> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // An O_DIRECTORY descriptor: the target of clone3's CLONE_INTO_CGROUP.
  int fd() const { return fd_.get(); }

  bool Has(const std::string& file) const;
  // The strongest GroupKill this group's control files allow.
  GroupKill Kill() const;
  sys::Result<std::string> Read(const std::string& file) const;
  sys::Result<void> Write(const std::string& file, std::string_view value) const;
  // The value of `key` in a flat keyed file ("oom_kill 3" in memory.events).
  sys::Result<std::optional<uint64_t>> ReadKey(const std::string& file, std::string_view key) const;
  // The values of `keys` in one read of a flat keyed file, in their order.
  sys::Result<std::vector<std::optional<uint64_t>>> ReadKeys(
      const std::string& file, std::initializer_list<std::string_view> keys) const;

  // The thread-group ids in cgroup.procs. Exited (zombie) tasks are not listed.
  sys::Result<std::vector<pid_t>> Procs() const;

  // An inotify descriptor that becomes readable when cgroup.events (v2)
  // changes, e.g. to "populated 0". The kernel rate-limits these
  // notifications (one per ~10 ms per file): read the file after each.
  sys::Result<sys::UniqueFd> WatchEvents() const;

  // rmdir. Succeeds only when no live process is left in the group.
  sys::Result<void> Remove();

 private:
  CgroupDir(std::string path, sys::UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  sys::UniqueFd fd_;
};

// mkdir -p, for the parents cordon's groups live under (mode 0755).
sys::Result<void> MakeDirs(const std::string& path);

// Parses the text of cgroup.procs.
std::vector<pid_t> ParsePids(std::string_view text);

}  // namespace cordon::contain
