// The only ways teardown acts on processes. An interface so that unit tests
// can inject one that records or does nothing; the shipped binary has
// exactly one implementation and no switch to change it.
#pragma once

#include "contain/cgroup_dir.h"
#include "sys/pidfd.h"

namespace cordon::contain {

class Signaller {
 public:
  virtual ~Signaller() = default;
  // pidfd_send_signal: the signal reaches that process or none.
  virtual sys::Result<void> Signal(const sys::PidFd& process, int sig) = 0;
  // Writes "1" to cgroup.kill: SIGKILL to every process in the group at once.
  virtual sys::Result<void> KillCgroup(const CgroupDir& group) = 0;
  // Writes cgroup.freeze (v2, Linux 5.2+). Frozen, no process of the group
  // runs user code (so none forks) until thawed; SIGKILL still ends a frozen
  // process. Teardown freezes a group that has no cgroup.kill before it
  // kills its members one by one, and thaws it once none is left.
  virtual sys::Result<void> FreezeCgroup(const CgroupDir& group, bool frozen) {
    return group.Write("cgroup.freeze", frozen ? "1" : "0");
  }
};

class KernelSignaller final : public Signaller {
 public:
  sys::Result<void> Signal(const sys::PidFd& process, int sig) override {
    return process.SendSignal(sig);
  }
  sys::Result<void> KillCgroup(const CgroupDir& group) override {
    return group.Write("cgroup.kill", "1");
  }
};

}  // namespace cordon::contain
