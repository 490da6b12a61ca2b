// Starting a grant's main process: clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)
// and a fixed, ordered child setup that ends in execve. The child side
// never allocates or throws: everything it needs is prepared here first.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "contain/grant_cgroups.h"
#include "contain/sandbox.h"
#include "proc/identity.h"
#include "sys/pidfd.h"

namespace cordon::contain {

// The child's setup checklist, in order (launch.cc, ChildMain). A failure
// is reported to the parent as {step, errno} and the child exits 127.
enum class SetupStep : int32_t {
  kCgroup = 1,  // join the v1 groups (the v2 group was entered by clone3)
  kSignals,     // default dispositions, empty mask
  kSession,     // setsid: its own session and process group
  kRlimits,
  kStdio,
  kWorkspace,  // chdir /workspace, or fchdir to the host directory
  kCloseFds,   // close_range: nothing of the supervisor's leaks in
  kExec,
  // With isolation (numbered after the foundation's, whose values are in
  // records already):
  kNetwork,        // a new network namespace, `lo` up
  kUserNamespace,  // wait for the id maps, become root of the namespace
  kHostname,       // "cordon" (UTS namespace)
  kMounts,         // the new root: binds, /proc, /dev, /tmp, pivot_root
  kInit,           // the pid namespace's init forks the command
  kCapabilities,   // drop every capability, lock securebits (no user namespace: become
                   // the sandbox's own uid)
  kNoNewPrivs,
  kLandlock,
  kSeccomp,  // the very last step before execve: it forbids the ones above
  kKeyring,  // a session keyring of its own (numbered last: it came last)
  // Where no cgroup holds the tree: wait until the supervisor has recorded
  // the process's identity (LaunchRequest::on_started) before anything of
  // the command runs. Fails only when the supervisor is gone.
  kRecorded,
};

std::string_view SetupStepName(SetupStep step);

struct SetupError {
  SetupStep step;
  int err;             // errno
  std::string detail;  // which part of the step, when it has parts ("bind /usr at /usr")
};

struct RlimitSetting {
  int resource;  // RLIMIT_*
  rlim_t soft;
  rlim_t hard;
};

struct LaunchRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value", exactly the child's environment
  std::optional<std::string> workspace;
  std::optional<std::string> stdin_bytes;  // none: /dev/null
  // When >= 0, the child's stdin is (a duplicate of) this descriptor instead
  // of `stdin_bytes`: the read end of a pipe the caller keeps writing to (a
  // session's shell reads its commands from it). The caller keeps owning it.
  int stdin_fd = -1;
  std::vector<RlimitSetting> rlimits;
  const GrantCgroups* cgroups = nullptr;
  // When >= 0, the program is this already-open (verified) file, executed
  // with execveat(fd, "", AT_EMPTY_PATH) instead of by path: what was
  // checked is what runs, whatever happens to the path meanwhile. argv[0]
  // is still what the program sees as its name.
  int exec_fd = -1;
  // The file behind exec_fd is a "#!" script: its interpreter reads it
  // through /dev/fd/N, so the descriptor stays open across execve.
  bool exec_fd_is_script = false;
  // Called once the main process exists, before its setup is waited for:
  // what the caller records about it (the store) overlaps the child's
  // setup instead of following it. Optional. Where no cgroup holds the
  // tree (`cgroups` null or empty), the identity recorded here is all that
  // finds the tree again after a supervisor's crash: the child then waits
  // for this call to return before it runs anything of the command (or
  // starts building a sandbox), and gives up if the supervisor dies first.
  // There, a failure is the launch's: the child is killed before it runs
  // anything, and Launch fails. Elsewhere it is the caller's to report.
  std::function<sys::Result<void>(const proc::Identity&, pid_t pgid)> on_started;
  // Isolation, prepared by the caller (null: none). With namespaces the
  // main process is the pid namespace's init, and the command its child.
  Sandbox* sandbox = nullptr;
  // false: Launch returns as soon as the child exists, without waiting for
  // its execve; ReadSetupReport gives the outcome later (it never blocks).
  // For a supervisor whose event loop must not wait on a child: clone3 to
  // execve is most of a spawn's time.
  bool wait_for_exec = true;
  // With a namespaced sandbox: park the sandbox instead of starting a
  // command. The init builds the sandbox's world, then writes one byte on
  // Launched::control and waits there for the command (SendCommand).
  // `argv`, `env`, the stdin fields and `rlimits` are then unused here.
  bool park = false;
};

struct Launched {
  sys::PidFd pidfd;
  proc::Identity identity;
  pid_t pgid = 0;
  sys::UniqueFd stdout_read;  // non-blocking
  sys::UniqueFd stderr_read;  // non-blocking
  // Set when the child failed before execve; it has exited (unreaped).
  std::optional<SetupError> setup_error;
  // With a pid namespace: where the init reports the command's exit
  // (ReadInitReport, once the main process has exited).
  sys::UniqueFd init_report;
  std::chrono::steady_clock::time_point started;
  // The child's setup report, until it was read (see wait_for_exec).
  sys::UniqueFd setup_report;
  // The request's sandbox when namespaced (names a failed mount step); the
  // caller keeps it alive as long as the Launched.
  const Sandbox* sandbox = nullptr;
  // A parked launch's end of the init's control socket: readable once the
  // init waits for its command (one byte), then where SendCommand writes.
  sys::UniqueFd control;
};

// Reads a launched child's setup report if it is there: a failed step sets
// `setup_error`; EOF (execve succeeded) or a report read earlier leaves it
// unset. Never blocks on a report opened by Launch without wait_for_exec;
// once the child has exited, the report is final.
sys::Result<void> ReadSetupReport(Launched& launched);

// Fails only for the supervisor's own errors (pipes, clone3); a failure in
// the child is a Launched with setup_error.
sys::Result<Launched> Launch(const LaunchRequest& request);

// Whether `command`'s argv, env and rlimits fit what a parked init can
// take (a fixed buffer: it may not allocate). A command that does not fit
// is launched cold.
bool FitsParked(const LaunchRequest& command);

// Gives a parked launch (LaunchRequest::park) its command: `argv`, `env`,
// stdin (`stdin_fd` or `stdin_bytes`) and `rlimits` of `command`; nothing
// else of it is read. The init then starts it as Launch would have, and
// `started` becomes now. The control socket is closed: a launch takes one
// command.
sys::Result<void> SendCommand(Launched& parked, const LaunchRequest& command);

// The paths execve tries for `program`: itself when it contains '/', else
// each directory of `path_var` (POSIX default when unset) joined with it.
std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::optional<std::string>& path_var);

}  // namespace cordon::contain
