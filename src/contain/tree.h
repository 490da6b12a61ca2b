// A grant's process tree as teardown sees it: who is in it now, and how to
// kill all of it at once if the mechanism can. The strongest mechanism
// available is used: a cgroup v2 group (holds setsid'ed descendants, killed
// atomically by cgroup.kill, or, before Linux 5.14, frozen and killed member
// by member), a pid namespace (its init takes the rest with it), else the
// process group (degraded).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "contain/cgroup_dir.h"
#include "contain/grant_cgroups.h"
#include "contain/signaller.h"
#include "sys/fd.h"
#include "sys/pidfd.h"

namespace cordon::contain {

class Tree {
 public:
  virtual ~Tree() = default;
  virtual std::string_view method() const = 0;
  // How the tree is killed, as the grant's release records it:
  // "cgroup.kill", "pid_namespace", "cgroup.freeze+kill", "kill_each" (a
  // group's members one by one), "process_group".
  virtual std::string_view teardown() const = 0;
  // Processes in the tree that have not exited (zombies excluded).
  virtual sys::Result<std::vector<pid_t>> Members() const = 0;
  // Kills every member at once if the mechanism can; false if it cannot
  // (the caller then signals members one by one).
  virtual sys::Result<bool> KillAll(Signaller& signaller) const = 0;
  // Stops every member from running, so that none can fork while they are
  // killed one by one; false if the mechanism cannot. A frozen tree stays
  // frozen until Thaw.
  virtual sys::Result<bool> Freeze(Signaller&) const { return false; }
  // Lets a frozen tree run again: called once no member is left.
  virtual sys::Result<void> Thaw(Signaller&) const { return {}; }
  // A member that passes SIGTERM on by itself (a pid namespace's init,
  // when a cgroup holds the tree and every member gets SIGTERM anyway):
  // the graceful round leaves it out, so that nobody gets SIGTERM twice.
  // 0: none.
  virtual pid_t Forwarder() const { return 0; }

  // Whether the end of the tree has been observed: no process of it is
  // left, not even one in the middle of its exit (a zombie counts as
  // dead). Members() can be empty before that: cgroup.procs stops listing
  // a process as soon as its exit begins, while it still holds its cgroup,
  // and a pid namespace's init leaves its cgroup before its exit waits for
  // the rest of the namespace to be reaped. Default: Members() is empty.
  virtual sys::Result<bool> Ended() const;
  // Descriptors that become readable when Ended() may have changed. Made
  // before Ended() is consulted, so that no change in between is missed;
  // one use each (the teardown closes them after a wake-up and asks again).
  // Empty: nothing to wait on; the teardown looks again on a timer.
  virtual sys::Result<std::vector<sys::UniqueFd>> EndEvents() const {
    return std::vector<sys::UniqueFd>{};
  }
  // Who is holding the end up when Members() is empty: named as survivors
  // when the end is not observed in time. Default: Members().
  virtual sys::Result<std::vector<pid_t>> Lingering() const { return Members(); }
};

// Membership from a group's cgroup.procs. A v2 group is killed at once with
// cgroup.kill. Without it (Linux before 5.14), when the tree is a pid
// namespace its init is killed (the kernel then kills the rest of the
// namespace and lets nobody in); either way the group is frozen
// (cgroup.freeze, 5.2+) so that nothing in it runs or forks, and each
// member listed is killed, until none is left; then it is thawed. A v1
// group (memory or pids, on a host without usable v2) has exact membership
// but neither, so its members are killed one by one until none is left.
//
// The end is observed when the group is empty of every task, exiting ones
// included (v2: cgroup.events says "populated 0", v1: "tasks" is empty; then
// rmdir succeeds), and, when the tree is a pid namespace, once its init's
// pidfd has signalled: the init's exit completes only after every other
// process of the namespace has been reaped.
class CgroupTree final : public Tree {
 public:
  // `ns_init`, if any, must outlive the tree. `kill`: how the group is
  // killed; by default the strongest its control files allow (a v1 group:
  // kEach).
  CgroupTree(const CgroupDir& group, bool v2, const sys::PidFd* ns_init = nullptr,
             std::optional<GroupKill> kill = std::nullopt);
  std::string_view method() const override { return v2_ ? "cgroup2" : "cgroup1"; }
  std::string_view teardown() const override;
  sys::Result<std::vector<pid_t>> Members() const override;
  // Where cgroup.kill cannot be written after all, falls back to freezing
  // (reporting why), so that the tree is still killed.
  sys::Result<bool> KillAll(Signaller& signaller) const override;
  sys::Result<bool> Freeze(Signaller& signaller) const override;
  sys::Result<void> Thaw(Signaller& signaller) const override;
  pid_t Forwarder() const override { return ns_init_ ? ns_init_->pid() : 0; }
  sys::Result<bool> Ended() const override;
  sys::Result<std::vector<sys::UniqueFd>> EndEvents() const override;
  sys::Result<std::vector<pid_t>> Lingering() const override;

 private:
  const CgroupDir& group_;
  bool v2_;
  const sys::PidFd* ns_init_;
  mutable GroupKill kill_;  // lowered by KillAll when cgroup.kill fails
};

class ProcessGroupTree final : public Tree {
 public:
  // `leader` is the main process (pid == pgid when it made its own group),
  // started at `leader_start_ticks`: it is a member while that very process
  // lives, even if it left the group; a recycled pid is not. Other members
  // are the group's processes that started no earlier than the leader
  // (anything older cannot be of this tree). If `pgid` is the supervisor's
  // own process group, only the leader is a member: the supervisor never
  // signals its own group.
  ProcessGroupTree(pid_t pgid, pid_t leader, uint64_t leader_start_ticks);
  std::string_view method() const override { return "process_group"; }
  std::string_view teardown() const override { return "process_group"; }
  sys::Result<std::vector<pid_t>> Members() const override;
  sys::Result<bool> KillAll(Signaller&) const override { return false; }

 private:
  pid_t pgid_;
  pid_t leader_;
  uint64_t leader_start_ticks_;
  bool own_group_;
};

// The tree of a sandbox with a pid namespace: its init and everything in
// the namespace. Killing the init kills the rest (the kernel does it), and
// the init's exit completes only once every other process of the namespace
// is gone: an exited init is a verified empty tree. Until then the init is
// the one member teardown sees; it forwards SIGTERM to the command.
class PidNamespaceTree final : public Tree {
 public:
  // `init` (the main process) must outlive the tree.
  explicit PidNamespaceTree(const sys::PidFd& init) : init_(init) {}
  std::string_view method() const override { return "pid_namespace"; }
  std::string_view teardown() const override { return "pid_namespace"; }
  sys::Result<std::vector<pid_t>> Members() const override;
  sys::Result<bool> KillAll(Signaller& signaller) const override;
  sys::Result<std::vector<sys::UniqueFd>> EndEvents() const override;

 private:
  const sys::PidFd& init_;
};

// The strongest tree available for a grant: its v2 group, else its pid
// namespace (`ns_init`, when it has one), else a v1 group, else the process
// group of its main process.
std::unique_ptr<Tree> TreeFor(const GrantCgroups* cgroups, pid_t pgid, pid_t leader,
                              uint64_t leader_start_ticks, const sys::PidFd* ns_init = nullptr);

}  // namespace cordon::contain
