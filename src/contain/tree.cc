#include "contain/tree.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "proc/stat.h"

namespace cordon::contain {
namespace {

// A second descriptor for the process `fd` names: the reactor watches each
// descriptor once, and the owner of `fd` may be watching it already.
sys::Result<sys::UniqueFd> DupPidFd(const sys::PidFd& fd) {
  int copy = ::fcntl(fd.fd(), F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return sys::FailErrno("fcntl(pidfd of " + std::to_string(fd.pid()) + ", F_DUPFD)");
  return sys::UniqueFd(copy);
}

}  // namespace

sys::Result<bool> Tree::Ended() const {
  CORDON_ASSIGN_OR_RETURN(std::vector<pid_t> members, Members());
  return members.empty();
}

sys::Result<std::vector<pid_t>> CgroupTree::Members() const {
  // cgroup.procs lists no exited tasks: a zombie is out of the group.
  return group_.Procs();
}

CgroupTree::CgroupTree(const CgroupDir& group, bool v2, const sys::PidFd* ns_init,
                       std::optional<GroupKill> kill)
    : group_(group),
      v2_(v2),
      ns_init_(ns_init),
      kill_(!v2    ? GroupKill::kEach
            : kill ? *kill
                   : group.Kill()) {}

std::string_view CgroupTree::teardown() const {
  if (kill_ != GroupKill::kCgroupKill && ns_init_) return "pid_namespace";
  return GroupKillName(kill_);
}

sys::Result<bool> CgroupTree::KillAll(Signaller& signaller) const {
  std::optional<sys::Error> failed;
  if (kill_ == GroupKill::kCgroupKill) {
    auto killed = signaller.KillCgroup(group_);
    if (killed) return true;
    failed = killed.error();
    kill_ = group_.Has("cgroup.freeze") ? GroupKill::kFreezeKill : GroupKill::kEach;
  }
  // Without cgroup.kill: the init of a pid namespace takes the namespace
  // with it (the kernel kills every other process there and lets no new one
  // be made). The teardown still kills every member it finds, frozen: a
  // process the group holds outside the namespace (none, unless one was
  // moved in) must not be left.
  if (ns_init_ && !ns_init_->HasExited()) {
    auto sent = signaller.Signal(*ns_init_, SIGKILL);
    if (!sent && sent.error().errno_value() != ESRCH && !failed) failed = sent.error();
  }
  if (failed) return std::unexpected(*failed);
  return false;
}

sys::Result<bool> CgroupTree::Freeze(Signaller& signaller) const {
  if (kill_ != GroupKill::kFreezeKill) return false;
  CORDON_RETURN_IF_ERROR(signaller.FreezeCgroup(group_, true));
  return true;
}

sys::Result<void> CgroupTree::Thaw(Signaller& signaller) const {
  return signaller.FreezeCgroup(group_, false);
}

sys::Result<bool> CgroupTree::Ended() const {
  if (ns_init_ && !ns_init_->HasExited()) return false;
  if (v2_) {
    CORDON_ASSIGN_OR_RETURN(std::optional<uint64_t> populated,
                            group_.ReadKey("cgroup.events", "populated"));
    if (!populated) return sys::Fail(group_.path() + "/cgroup.events: no \"populated\"", EINVAL);
    return *populated == 0;
  }
  // v1 has no cgroup.events; "tasks" lists every thread until its exit has
  // taken it out of the group (cgroup.procs drops it when the exit begins).
  CORDON_ASSIGN_OR_RETURN(std::string tasks, group_.Read("tasks"));
  return ParsePids(tasks).empty();
}

sys::Result<std::vector<sys::UniqueFd>> CgroupTree::EndEvents() const {
  std::vector<sys::UniqueFd> events;
  if (ns_init_ && !ns_init_->HasExited()) {
    // Ended() stays false while the init lives, so its exit is the only
    // event worth waiting for; cgroup.events is watched, if still needed,
    // at the next look. (An inotify watch made and closed for nothing costs
    // milliseconds: see Teardown::AwaitEnd.)
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd init, DupPidFd(*ns_init_));
    events.push_back(std::move(init));
    return events;
  }
  if (v2_) {
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd changes, group_.WatchEvents());
    events.push_back(std::move(changes));
  }
  return events;
}

sys::Result<std::vector<pid_t>> CgroupTree::Lingering() const {
  CORDON_ASSIGN_OR_RETURN(std::vector<pid_t> left, group_.Procs());
  if (left.empty()) {
    // Exiting tasks, which cgroup.procs no longer lists, by thread id.
    CORDON_ASSIGN_OR_RETURN(std::string threads, group_.Read(v2_ ? "cgroup.threads" : "tasks"));
    left = ParsePids(threads);
  }
  if (ns_init_ && !ns_init_->HasExited() &&
      std::find(left.begin(), left.end(), ns_init_->pid()) == left.end()) {
    left.push_back(ns_init_->pid());
  }
  return left;
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
  for (const proc::Stat& st : proc::GroupMembersSince(pids, pgid_, leader_start_ticks_)) {
    if (st.pid != leader_) members.push_back(st.pid);
  }
  return members;
}

sys::Result<std::vector<pid_t>> PidNamespaceTree::Members() const {
  if (init_.HasExited()) return std::vector<pid_t>{};
  return std::vector<pid_t>{init_.pid()};
}

sys::Result<std::vector<sys::UniqueFd>> PidNamespaceTree::EndEvents() const {
  std::vector<sys::UniqueFd> events;
  if (!init_.HasExited()) {
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd init, DupPidFd(init_));
    events.push_back(std::move(init));
  }
  return events;
}

sys::Result<bool> PidNamespaceTree::KillAll(Signaller& signaller) const {
  if (init_.HasExited()) return true;
  auto sent = signaller.Signal(init_, SIGKILL);
  if (!sent && sent.error().errno_value() != ESRCH) return std::unexpected(sent.error());
  return true;
}

std::unique_ptr<Tree> TreeFor(const GrantCgroups* cgroups, pid_t pgid, pid_t leader,
                              uint64_t leader_start_ticks, const sys::PidFd* ns_init) {
  if (cgroups && cgroups->v2()) return std::make_unique<CgroupTree>(*cgroups->v2(), true, ns_init);
  if (ns_init) return std::make_unique<PidNamespaceTree>(*ns_init);
  if (cgroups && cgroups->v1()) return std::make_unique<CgroupTree>(*cgroups->v1(), false);
  return std::make_unique<ProcessGroupTree>(pgid, leader, leader_start_ticks);
}

}  // namespace cordon::contain
