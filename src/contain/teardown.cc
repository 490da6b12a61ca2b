#include "contain/teardown.h"

#include <signal.h>

#include <algorithm>

#include "sys/epoll_reactor.h"

namespace cordon::contain {

nlohmann::json ToJson(const Release& r) {
  return {{"dead", r.dead},
          {"escalated", r.escalated},
          {"survivors", r.survivors},
          {"method", r.method},
          {"teardown", r.teardown.empty() ? nlohmann::json() : nlohmann::json(r.teardown)},
          {"teardown_us", r.duration.count()},
          {"problem", r.problem.empty() ? nlohmann::json() : nlohmann::json(r.problem)}};
}

sys::Result<std::unique_ptr<Teardown>> Teardown::Create(sys::Reactor& reactor, const Tree& tree,
                                                        Signaller& signaller,
                                                        TeardownOptions options) {
  CORDON_ASSIGN_OR_RETURN(sys::TimerFd timer, sys::TimerFd::Create());
  return std::unique_ptr<Teardown>(
      new Teardown(reactor, tree, signaller, options, std::move(timer)));
}

Teardown::Teardown(sys::Reactor& reactor, const Tree& tree, Signaller& signaller,
                   TeardownOptions options, sys::TimerFd timer)
    : reactor_(reactor),
      tree_(tree),
      signaller_(signaller),
      options_(options),
      timer_(std::move(timer)) {}

Teardown::~Teardown() { UnwatchAll(); }

void Teardown::UnwatchAll() {
  for (auto& [pid, fd] : watched_) reactor_.Unwatch(fd.fd());
  watched_.clear();
  StopAwaitingEnd();
  reactor_.Unwatch(timer_.fd());
}

void Teardown::Start(TeardownMode mode, Done done) {
  done_ = std::move(done);
  started_ = std::chrono::steady_clock::now();
  release_.method = std::string(tree_.method());
  release_.teardown = std::string(tree_.teardown());
  if (auto watched = reactor_.Watch(timer_.fd(), [this] { OnTimer(); }); !watched) {
    release_.problem = watched.error().message();
    Finish(false, {});
    return;
  }
  if (mode == TeardownMode::kGraceful && options_.grace.count() > 0) {
    phase_ = Phase::kTerm;
    SignalRound(SIGTERM);
    (void)timer_.Arm(options_.grace);
  } else {
    Escalate();
  }
  Check();
}

// Sends `sig` (0: none) to every member not yet signalled in this phase:
// those already watched through their pidfds; the others once pinned with
// pidfds and confirmed still members *after* pinning (so a recycled pid is
// never signalled). Watches them.
void Teardown::SignalRound(int sig) {
  // Members pinned in an earlier phase (SIGTERM, which they ignored) get
  // this phase's signal through the pidfd they are pinned by: it still
  // names that very process.
  if (sig != 0) {
    for (auto& [pid, fd] : watched_) {
      if (signalled_.contains(pid)) continue;
      if (sig != SIGTERM || pid != tree_.Forwarder()) (void)signaller_.Signal(fd, sig);
      signalled_.insert(pid);
    }
  }
  auto members = tree_.Members();
  if (!members) {
    release_.problem = members.error().message();
    return;
  }
  std::map<pid_t, sys::PidFd> pinned;
  for (pid_t pid : *members) {
    if (watched_.contains(pid)) continue;
    if (watched_.size() + pinned.size() >= kMaxWatched && (sig == 0 || signalled_.contains(pid))) {
      continue;  // nothing to send and no room to watch: a later round
    }
    if (auto fd = sys::PidFd::Open(pid)) pinned.emplace(pid, std::move(*fd));
  }
  if (pinned.empty()) return;
  auto confirmed = tree_.Members();
  if (!confirmed) {
    release_.problem = confirmed.error().message();
    return;
  }
  for (auto& [pid, fd] : pinned) {
    if (std::find(confirmed->begin(), confirmed->end(), pid) == confirmed->end()) continue;
    if (sig != 0 && !signalled_.contains(pid)) {
      if (sig != SIGTERM || pid != tree_.Forwarder()) {
        (void)signaller_.Signal(fd, sig);  // ESRCH: it exited meanwhile
      }
      signalled_.insert(pid);
    }
    if (watched_.size() >= kMaxWatched) continue;
    int raw = fd.fd();
    if (!reactor_.Watch(raw, [this, pid] { OnExit(pid); })) continue;
    watched_.emplace(pid, std::move(fd));
  }
}

void Teardown::Escalate() {
  auto members = tree_.Members();
  release_.escalated = phase_ == Phase::kTerm && members && !members->empty();
  phase_ = Phase::kKill;
  signalled_.clear();
  auto all = tree_.KillAll(signaller_);
  kills_all_ = all && *all;
  if (!all) release_.problem = all.error().message();
  if (!kills_all_) {
    // No atomic kill: freeze first, so that no member forks faster than
    // the rounds below kill them. A tree that cannot be frozen is still
    // killed member by member.
    auto frozen = tree_.Freeze(signaller_);
    frozen_ = frozen && *frozen;
    if (!frozen) release_.problem = frozen.error().message();
  }
  release_.teardown = std::string(tree_.teardown());  // KillAll may have fallen back
  SignalRound(kills_all_ ? 0 : SIGKILL);
  (void)timer_.Arm(options_.verify_timeout);
}

void Teardown::OnExit(pid_t pid) {
  auto it = watched_.find(pid);
  if (it == watched_.end()) return;
  reactor_.Unwatch(it->second.fd());
  watched_.erase(it);
  Check();
}

void Teardown::OnTimer() {
  // The reactor may wake us spuriously (sys::Reactor's contract; the Asio
  // loop did, with a recycled descriptor's old events): only a timer that
  // fired is a deadline. Without this check a verify timer woken 30 ms
  // after SIGKILL reported "still alive 20000 ms after SIGKILL".
  if (!timer_.Consume()) return;
  if (phase_ == Phase::kTerm) {
    Escalate();
    Check();
    return;
  }
  if (phase_ == Phase::kKill) {
    auto members = tree_.Members();
    if (!members) {
      release_.problem = members.error().message();
      Finish(false, {});
      return;
    }
    if (!members->empty()) {
      if (release_.problem.empty()) {
        release_.problem = "processes still alive " +
                           std::to_string(options_.verify_timeout.count()) + " ms after SIGKILL";
      }
      Finish(false, *members);
      return;
    }
    auto ended = tree_.Ended();
    if (ended && *ended) {
      Finish(true, {});
      return;
    }
    auto lingering = tree_.Lingering();
    release_.problem = !ended ? ended.error().message()
                              : "the tree's end was not observed " +
                                    std::to_string(options_.verify_timeout.count()) +
                                    " ms after SIGKILL: processes still in their exit hold its "
                                    "cgroup or its pid namespace";
    Finish(false, lingering ? *lingering : std::vector<pid_t>{});
  }
}

// Called whenever no pinned member is left: look again.
void Teardown::Check() {
  // A few rounds catch members that forked while the others were dying;
  // beyond that the timer decides.
  for (int round = 0; round < 4 && watched_.empty() && phase_ != Phase::kDone; ++round) {
    auto members = tree_.Members();
    if (!members) {
      release_.problem = members.error().message();
      return;  // the timer will finish it
    }
    if (members->empty()) {
      // Nobody is left to run: what is still exiting does so frozen or not.
      Thaw();
      AwaitEnd();
      return;
    }
    if (phase_ == Phase::kTerm) {
      SignalRound(SIGTERM);
    } else {
      if (kills_all_) (void)tree_.KillAll(signaller_);
      SignalRound(kills_all_ ? 0 : SIGKILL);
    }
  }
}

// Nobody is listed any more; the tree is dead once its end is observed too
// (an exiting process is unlisted before it has let go of its cgroup or,
// for a pid namespace's init, of its namespace). Waits on the tree's end
// events with the verify timer as the deadline; never sleeps.
void Teardown::AwaitEnd() {
  StopAwaitingEnd();
  // Most often the end has happened by now: look before making anything to
  // wait on. (Closing an inotify descriptor waits for the kernel's fsnotify
  // reaper and an SRCU grace period: 2-20 ms here, most of a whole run.)
  if (auto ended = tree_.Ended(); ended && *ended) {
    Finish(true, {});
    return;
  }
  // The events, then another look: a change between them is not missed.
  auto events = tree_.EndEvents();
  if (!events) {
    release_.problem = events.error().message();
    return;  // the timer will finish it
  }
  auto ended = tree_.Ended();
  if (!ended) {
    release_.problem = ended.error().message();
    return;
  }
  if (*ended) {
    Finish(true, {});
    return;
  }
  for (sys::UniqueFd& fd : *events) {
    int raw = fd.get();
    if (!reactor_.Watch(raw, [this] { OnEndEvent(); })) continue;
    end_events_.push_back(std::move(fd));
  }
  if (!end_events_.empty()) return;
  // Nothing to wait on (a v1 group has no cgroup.events): look again soon,
  // less often the longer it takes, until the verify timer decides.
  if (!recheck_) {
    auto timer = sys::TimerFd::Create();
    if (!timer) {
      release_.problem = timer.error().message();
      return;
    }
    recheck_.emplace(std::move(*timer));
  }
  reactor_.Unwatch(recheck_->fd());
  if (!reactor_.Watch(recheck_->fd(), [this] { OnEndEvent(); })) return;
  (void)recheck_->Arm(recheck_after_);
  recheck_after_ = std::min(recheck_after_ * 2, std::chrono::milliseconds(50));
}

void Teardown::OnEndEvent() {
  StopAwaitingEnd();
  Check();
}

void Teardown::StopAwaitingEnd() {
  for (const sys::UniqueFd& fd : end_events_) reactor_.Unwatch(fd.get());
  end_events_.clear();
  if (recheck_) {
    reactor_.Unwatch(recheck_->fd());
    (void)recheck_->Disarm();
    recheck_->Consume();
  }
}

void Teardown::Thaw() {
  if (!frozen_) return;
  frozen_ = false;
  if (auto thawed = tree_.Thaw(signaller_); !thawed) release_.problem = thawed.error().message();
}

void Teardown::Finish(bool dead, std::vector<pid_t> survivors) {
  // Dead: nothing is left to thaw but the group. Survivors stay frozen:
  // they cannot run until a later teardown kills them.
  if (dead) Thaw();
  phase_ = Phase::kDone;
  UnwatchAll();
  (void)timer_.Disarm();
  release_.dead = dead;
  if (dead) release_.problem.clear();
  release_.survivors = std::move(survivors);
  release_.duration = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - started_);
  Done done = std::move(done_);
  done(release_);  // last: it may start the next step of the caller
}

sys::Result<Release> KillNow(const Tree& tree, Signaller& signaller,
                             std::chrono::milliseconds verify_timeout) {
  CORDON_ASSIGN_OR_RETURN(sys::EpollReactor reactor, sys::EpollReactor::Create());
  CORDON_ASSIGN_OR_RETURN(
      std::unique_ptr<Teardown> teardown,
      Teardown::Create(reactor, tree, signaller, TeardownOptions{{}, verify_timeout}));
  std::optional<Release> release;
  teardown->Start(TeardownMode::kImmediate, [&](const Release& r) { release = r; });
  CORDON_RETURN_IF_ERROR(reactor.RunUntil([&] { return release.has_value(); }));
  return *release;
}

}  // namespace cordon::contain
