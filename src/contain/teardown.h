// Teardown of a grant's process tree, and the verification of its death.
// Runs on a Reactor: it waits on pidfds and a timer, never sleeps.
//
// Graceful: SIGTERM to every member, up to `grace` for the tree to empty,
// then SIGKILL (escalated). Immediate: SIGKILL at once. SIGKILL goes to the
// whole tree at once where the tree can (cgroup.kill); otherwise the tree
// is frozen where it can be (cgroup.freeze) and every member is killed one
// by one, round after round, until none is left; then it is thawed. A tree
// left with survivors stays frozen. Either way death is
// then verified: every pinned member's pidfd reports exit, a fresh look at
// the tree finds nobody, and the end of the tree is observed (Tree::Ended:
// its cgroup unpopulated, its pid namespace's init exited), waited for on
// the events the tree names. `dead` is reported only then; if it is not
// observed by `verify_timeout`, the survivors are named.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "contain/signaller.h"
#include "contain/tree.h"
#include "sys/reactor.h"
#include "sys/timerfd.h"

namespace cordon::contain {

struct Release {
  bool dead = false;       // observed: nothing of the tree is left
  bool escalated = false;  // SIGTERM was not enough; SIGKILL was sent
  std::vector<pid_t> survivors;
  std::string method;  // what holds the tree: "cgroup2", "pid_namespace", "process_group"
  // How it was killed (Tree::teardown): "cgroup.kill", "pid_namespace",
  // "cgroup.freeze+kill", "kill_each", "process_group".
  std::string teardown;
  std::chrono::microseconds duration{0};
  std::string problem;  // why death could not be verified, if it could not
};

// {"dead", "escalated", "survivors", "method", "teardown", "teardown_us",
//  "problem"}.
nlohmann::json ToJson(const Release& release);

struct TeardownOptions {
  std::chrono::milliseconds grace{2000};
  std::chrono::milliseconds verify_timeout{5000};
};

enum class TeardownMode { kGraceful, kImmediate };

class Teardown final {
 public:
  using Done = std::function<void(const Release&)>;

  // `tree` and `signaller` must outlive the Teardown.
  static sys::Result<std::unique_ptr<Teardown>> Create(sys::Reactor& reactor, const Tree& tree,
                                                       Signaller& signaller,
                                                       TeardownOptions options);
  ~Teardown();
  Teardown(const Teardown&) = delete;
  Teardown& operator=(const Teardown&) = delete;

  // Runs `done` exactly once, possibly before Start returns. `done` must
  // not destroy this Teardown.
  void Start(TeardownMode mode, Done done);
  bool finished() const { return phase_ == Phase::kDone; }

 private:
  enum class Phase { kIdle, kTerm, kKill, kDone };
  // At most this many pidfds are held at once; the rest wait their turn.
  static constexpr size_t kMaxWatched = 256;

  Teardown(sys::Reactor& reactor, const Tree& tree, Signaller& signaller, TeardownOptions options,
           sys::TimerFd timer);
  void SignalRound(int sig);
  void Escalate();
  void OnExit(pid_t pid);
  void OnTimer();
  void Check();
  void AwaitEnd();
  void OnEndEvent();
  void StopAwaitingEnd();
  void Thaw();
  void Finish(bool dead, std::vector<pid_t> survivors);
  void UnwatchAll();

  sys::Reactor& reactor_;
  const Tree& tree_;
  Signaller& signaller_;
  TeardownOptions options_;
  sys::TimerFd timer_;
  Phase phase_ = Phase::kIdle;
  Done done_;
  Release release_;
  std::chrono::steady_clock::time_point started_;
  std::map<pid_t, sys::PidFd> watched_;
  std::set<pid_t> signalled_;  // in the current phase
  bool kills_all_ = false;     // the tree has an atomic kill (cgroup.kill)
  bool frozen_ = false;        // the tree was frozen for the kill and not yet thawed
  // While the members are gone but the end is not yet observed: the
  // descriptors from Tree::EndEvents, watched until one wakes us, or, for
  // a tree with none, a timer to look again (made when first needed).
  std::vector<sys::UniqueFd> end_events_;
  std::optional<sys::TimerFd> recheck_;
  std::chrono::milliseconds recheck_after_{1};
};

// Tears `tree` down at once (TeardownMode::kImmediate) and waits, blocking,
// on a reactor of its own, for verified death: for a tree nobody
// supervises on a loop (a dead supervisor's, reaped; an execution never
// attached to one).
sys::Result<Release> KillNow(const Tree& tree, Signaller& signaller,
                             std::chrono::milliseconds verify_timeout);

}  // namespace cordon::contain
