#include "contain/tree.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "proc/stat.h"

namespace cordon::contain {

sys::Result<std::vector<pid_t>> CgroupTree::Members() const {
  // cgroup.procs lists no exited tasks: a zombie is out of the group.
  return group_.Procs();
}

sys::Result<bool> CgroupTree::KillAll(Signaller& signaller) const {
  if (!v2_) return false;
  CORDON_RETURN_IF_ERROR(signaller.KillCgroup(group_));
  return true;
}

ProcessGroupTree::ProcessGroupTree(pid_t pgid, pid_t leader, uint64_t leader_start_ticks)
    : pgid_(pgid),
      leader_(leader),
      leader_start_ticks_(leader_start_ticks),
      own_group_(pgid == ::getpgrp()) {}

sys::Result<std::vector<pid_t>> ProcessGroupTree::Members() const {
  std::vector<pid_t> members;
  auto leader = proc::ReadStat(leader_);
  if (leader && !leader->exited() && leader->start_ticks == leader_start_ticks_) {
    members.push_back(leader_);
  }
  if (own_group_) return members;
  CORDON_ASSIGN_OR_RETURN(std::vector<pid_t> pids, proc::ListPids());
  for (pid_t pid : pids) {
    if (pid == leader_) continue;
    auto st = proc::ReadStat(pid);
    if (st && st->pgrp == pgid_ && !st->exited() && st->start_ticks >= leader_start_ticks_) {
      members.push_back(pid);
    }
  }
  return members;
}

sys::Result<std::vector<pid_t>> PidNamespaceTree::Members() const {
  if (init_.HasExited()) return std::vector<pid_t>{};
  return std::vector<pid_t>{init_.pid()};
}

sys::Result<bool> PidNamespaceTree::KillAll(Signaller& signaller) const {
  if (init_.HasExited()) return true;
  auto sent = signaller.Signal(init_, SIGKILL);
  if (!sent && sent.error().errno_value() != ESRCH) return std::unexpected(sent.error());
  return true;
}

std::unique_ptr<Tree> TreeFor(const GrantCgroups* cgroups, pid_t pgid, pid_t leader,
                              uint64_t leader_start_ticks, const sys::PidFd* ns_init) {
  pid_t forwarder = ns_init ? ns_init->pid() : 0;
  if (cgroups && cgroups->v2()) {
    return std::make_unique<CgroupTree>(*cgroups->v2(), true, forwarder);
  }
  if (ns_init) return std::make_unique<PidNamespaceTree>(*ns_init);
  if (cgroups && cgroups->v1()) return std::make_unique<CgroupTree>(*cgroups->v1(), false);
  return std::make_unique<ProcessGroupTree>(pgid, leader, leader_start_ticks);
}

}  // namespace cordon::contain
