// A grant's process tree as teardown sees it: who is in it now, and how to
// kill all of it at once if the mechanism can. The strongest mechanism
// available is used: a cgroup v2 group (holds setsid'ed descendants, killed
// atomically by cgroup.kill), else the process group (degraded).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "contain/cgroup_dir.h"
#include "contain/grant_cgroups.h"
#include "contain/signaller.h"

namespace cordon::contain {

class Tree {
 public:
  virtual ~Tree() = default;
  virtual std::string_view method() const = 0;
  // Processes in the tree that have not exited (zombies excluded).
  virtual sys::Result<std::vector<pid_t>> Members() const = 0;
  // Kills every member at once if the mechanism can; false if it cannot
  // (the caller then signals members one by one).
  virtual sys::Result<bool> KillAll(Signaller& signaller) const = 0;
  // A member that passes SIGTERM on by itself (a pid namespace's init,
  // when a cgroup holds the tree and every member gets SIGTERM anyway):
  // the graceful round leaves it out, so that nobody gets SIGTERM twice.
  // 0: none.
  virtual pid_t Forwarder() const { return 0; }
};

// Membership from a group's cgroup.procs. A v2 group is killed at once with
// cgroup.kill; a v1 group (memory or pids, on a host without usable v2) has
// exact membership but no atomic kill, so its members are killed one by one
// until none is left.
class CgroupTree final : public Tree {
 public:
  CgroupTree(const CgroupDir& group, bool v2, pid_t forwarder = 0)
      : group_(group), v2_(v2), forwarder_(forwarder) {}
  std::string_view method() const override { return v2_ ? "cgroup2" : "cgroup1"; }
  sys::Result<std::vector<pid_t>> Members() const override;
  sys::Result<bool> KillAll(Signaller& signaller) const override;
  pid_t Forwarder() const override { return forwarder_; }

 private:
  const CgroupDir& group_;
  bool v2_;
  pid_t forwarder_;
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
  sys::Result<std::vector<pid_t>> Members() const override;
  sys::Result<bool> KillAll(Signaller& signaller) const override;

 private:
  const sys::PidFd& init_;
};

// The strongest tree available for a grant: its v2 group, else its pid
// namespace (`ns_init`, when it has one), else a v1 group, else the process
// group of its main process.
std::unique_ptr<Tree> TreeFor(const GrantCgroups* cgroups, pid_t pgid, pid_t leader,
                              uint64_t leader_start_ticks, const sys::PidFd* ns_init = nullptr);

}  // namespace cordon::contain
