#include "run/execution.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "contain/pid_init.h"
#include "proc/signal_identity.h"
#include "proc/stat.h"

namespace cordon::run {
namespace {

using contain::Capability;

std::vector<contain::RlimitSetting> Rlimits(const contain::Spec& spec,
                                            const contain::Grant& grant) {
  std::vector<contain::RlimitSetting> out;
  const contain::Limits& l = spec.limits;
  auto put = [&](int resource, int64_t soft, int64_t hard) {
    out.push_back({resource, static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)});
  };
  if (l.address_space_bytes) put(RLIMIT_AS, *l.address_space_bytes, *l.address_space_bytes);
  // SIGXCPU at the limit, SIGKILL a second later for a process that ignores it.
  if (l.cpu_seconds) put(RLIMIT_CPU, *l.cpu_seconds, *l.cpu_seconds + 1);
  if (l.file_size_bytes) put(RLIMIT_FSIZE, *l.file_size_bytes, *l.file_size_bytes);
  if (l.open_files) put(RLIMIT_NOFILE, *l.open_files, *l.open_files);
  if (l.pids && grant.Mechanism(Capability::kProcessCount) == "rlimit") {
    put(RLIMIT_NPROC, *l.pids, *l.pids);
  }
  // A core dump would write the sandbox's memory where the host decides.
  if (grant.isolation) put(RLIMIT_CORE, 0, 0);
  return out;
}

int64_t Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

int64_t TimevalMs(const struct timeval& tv) { return tv.tv_sec * 1000 + tv.tv_usec / 1000; }

// The command `spec` runs: its argv and its exact environment (its stdin
// is the caller's to add: a size check need not copy it).
contain::LaunchRequest CommandOf(const contain::Spec& spec) {
  contain::LaunchRequest command;
  command.argv = spec.Command();
  for (const auto& [name, value] : spec.env) command.env.push_back(name + "=" + value);
  return command;
}

}  // namespace

bool Execution::FitsParked(const contain::Spec& spec) {
  return contain::FitsParked(CommandOf(spec));
}

sys::Result<std::unique_ptr<Execution>> Execution::Start(sys::Reactor& reactor, store::Store& store,
                                                         contain::Signaller& signaller,
                                                         contain::Grant grant,
                                                         const contain::Spec& spec,
                                                         ExecutionOptions options, Done done) {
  CORDON_ASSIGN_OR_RETURN(auto e, Spawn(reactor, store, signaller, std::move(grant), spec,
                                        std::move(options), std::move(done)));
  CORDON_RETURN_IF_ERROR(e->Attach());
  return e;
}

sys::Result<std::unique_ptr<Execution>> Execution::Spawn(sys::Reactor& reactor, store::Store& store,
                                                         contain::Signaller& signaller,
                                                         contain::Grant grant,
                                                         const contain::Spec& spec,
                                                         ExecutionOptions options, Done done) {
  std::unique_ptr<Execution> e(new Execution(reactor, store, signaller, std::move(grant), spec,
                                             std::move(options), std::move(done)));
  CORDON_RETURN_IF_ERROR(e->Begin(spec));
  return e;
}

Execution::Execution(sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
                     contain::Grant grant, const contain::Spec& spec, ExecutionOptions options,
                     Done done)
    : reactor_(reactor),
      store_(store),
      signaller_(signaller),
      grant_(std::move(grant)),
      grace_(spec.limits.grace_ms),
      options_(std::move(options)),
      done_(std::move(done)),
      out_{{}, Capture(static_cast<size_t>(spec.limits.output_limit_bytes)), StreamId::kStdout},
      err_{{}, Capture(static_cast<size_t>(spec.limits.output_limit_bytes)), StreamId::kStderr} {
  if (spec.limits.timeout_ms) timeout_ = std::chrono::milliseconds(*spec.limits.timeout_ms);
  result_.grant = Summarize(grant_);
}

sys::Result<std::unique_ptr<Execution>> Execution::Park(sys::Reactor& reactor, store::Store& store,
                                                        contain::Signaller& signaller,
                                                        contain::Grant grant,
                                                        const contain::Spec& spec,
                                                        std::function<void()> ready, Done done) {
  CORDON_ASSIGN_OR_RETURN(auto e, SpawnParked(reactor, store, signaller, std::move(grant), spec,
                                              std::move(ready), std::move(done)));
  CORDON_RETURN_IF_ERROR(e->Attach());
  return e;
}

sys::Result<std::unique_ptr<Execution>> Execution::SpawnParked(
    sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller, contain::Grant grant,
    const contain::Spec& spec, std::function<void()> ready, Done done) {
  if (!grant.isolation || !grant.isolation->namespaces) {
    return sys::Fail("park: only a grant with namespaces has a sandbox that can wait", EINVAL);
  }
  std::unique_ptr<Execution> e(new Execution(reactor, store, signaller, std::move(grant), spec,
                                             ExecutionOptions{}, std::move(done)));
  e->parked_ = true;
  e->on_parked_ready_ = std::move(ready);
  CORDON_RETURN_IF_ERROR(e->Begin(spec));
  return e;
}

decltype(ExecutionOptions::release_elsewhere) ReleaseOn(sys::Offload& offload) {
  return [&offload](std::move_only_function<void()> release, std::move_only_function<void()> then) {
    offload(std::move(release), std::move(then));
  };
}

Execution::~Execution() {
  for (Pipe* p : {&out_, &err_}) {
    if (p->fd) reactor_.Unwatch(p->fd.get());
  }
  if (watching_child_) reactor_.Unwatch(child_.pidfd.fd());
  if (watching_control_) reactor_.Unwatch(child_.control.get());
  if (deadline_) reactor_.Unwatch(deadline_->fd());
  if (tree_ && !attached_) KillUnattached();
}

void Execution::KillUnattached() {
  stop_ = Stop::kDiscarded;
  if (auto release = contain::KillNow(*tree_, signaller_, options_.verify_timeout)) {
    result_.release = *release;
  } else {
    // No descriptor for a reactor of its own, likely what failed the
    // Attach: the main process is killed at least (with a pid namespace,
    // all of it), and the grant stays active for reap.
    (void)signaller_.Signal(child_.pidfd, SIGKILL);
    result_.release.method = std::string(tree_->method());
    result_.release.problem = "cannot verify the teardown: " + release.error().message();
  }
  if (auto reaped = child_.pidfd.TryReap(); reaped && *reaped) TakeExit(**reaped);
  Conclude();
}

sys::Result<void> Execution::Begin(const contain::Spec& spec) {
  contain::LaunchRequest request = CommandOf(spec);
  if (spec.workspace) request.workspace = spec.workspace->string();
  request.stdin_bytes = spec.stdin_bytes;
  request.stdin_fd = options_.stdin_fd;
  request.rlimits = Rlimits(spec, grant_);
  request.cgroups = grant_.cgroups ? &*grant_.cgroups : nullptr;
  request.exec_fd = options_.exec_fd;
  request.exec_fd_is_script = options_.exec_fd_is_script;
  if (spec.isolation.network == contain::Network::kHost && spec.isolation.enabled()) {
    result_.warnings.push_back(
        "--network host: the command shares the host's network (no network namespace)");
  }
  if (!spec.isolation.enabled()) {
    result_.warnings.push_back(
        std::string("--isolation none: no namespaces, seccomp or Landlock: the command sees and "
                    "may touch whatever its user may") +
        (::geteuid() == 0 ? "; as root it may also move itself out of its cgroup, where the "
                            "teardown does not reach"
                          : ""));
  }
  // The loop does not wait for the child's execve; the report is read in
  // Finish, when the main process has exited and the report is final.
  request.wait_for_exec = false;
  request.park = parked_;

  sys::Result<void> prepared;
  if (grant_.isolation) {
    const contain::GrantIsolation& g = *grant_.isolation;
    std::error_code ec;
    contain::SandboxRequest sr;
    sr.spec = &spec.isolation;
    sr.private_workspace_limits = {spec.limits.disk_bytes, spec.limits.disk_inodes};
    sr.workspace =
        spec.workspace ? spec.workspace->string() : std::filesystem::current_path(ec).string();
    sr.namespaces = g.namespaces;
    sr.seccomp = g.seccomp;
    sr.landlock_abi = g.landlock_abi;
    sr.outside_uid = g.outside_uid;
    sr.outside_gid = g.outside_gid;
    sr.lease_fd = g.lease ? g.lease->lock_fd() : -1;
    sr.exec_fd = options_.exec_fd;
    auto sandbox = contain::Sandbox::Prepare(sr);
    if (sandbox) {
      sandbox_.emplace(std::move(*sandbox));
      request.sandbox = &*sandbox_;
    } else {
      prepared = std::unexpected(sandbox.error().Context("prepare the sandbox"));
    }
  }

  // Recorded while the child sets itself up (the store write is one of
  // the slower parts of a run).
  request.on_started = [this](const proc::Identity& identity, pid_t pgid) -> sys::Result<void> {
    auto recorded = store_.RecordStart(grant_.id, identity, pgid);
    if (!recorded) {
      result_.warnings.push_back("the grant's process could not be recorded in the store: " +
                                 recorded.error().message());
    }
    return recorded;
  };
  auto launched = prepared ? contain::Launch(request)
                           : sys::Result<contain::Launched>(std::unexpected(prepared.error()));
  if (!launched) {
    // Nothing was spawned (or the one child was killed and reaped).
    if (grant_.cgroups) (void)grant_.cgroups->Remove();
    contain::Release nothing;
    nothing.dead = true;
    nothing.method = "none";
    nothing.problem = launched.error().message();
    (void)store_.RecordRelease(grant_.id, std::string(OutcomeName(Outcome::kSetupFailed)),
                               contain::ToJson(nothing), true);
    return std::unexpected(launched.error().Context("launch"));
  }
  child_ = std::move(*launched);
  if (sandbox_) {
    for (const auto& note : sandbox_->notes()) result_.warnings.push_back(note);
    // The child has its own copies of the detached mount trees now. Kept,
    // they would pin the sandbox's filesystems (a workspace's loop image)
    // past its death, to be unmounted wherever the execution is destroyed.
    sandbox_->CloseTrees();
  }

  bool pid_namespace = sandbox_ && sandbox_->namespaced();
  tree_ = contain::TreeFor(grant_.cgroups ? &*grant_.cgroups : nullptr, child_.pgid,
                           child_.identity.pid, child_.identity.start_ticks,
                           pid_namespace ? &child_.pidfd : nullptr);
  return {};
}

sys::Result<void> Execution::Attach() {
  CORDON_ASSIGN_OR_RETURN(
      teardown_,
      contain::Teardown::Create(reactor_, *tree_, signaller_,
                                contain::TeardownOptions{grace_, options_.verify_timeout}));

  out_.fd = std::move(child_.stdout_read);
  err_.fd = std::move(child_.stderr_read);
  for (Pipe* p : {&out_, &err_}) {
    CORDON_RETURN_IF_ERROR(reactor_.Watch(p->fd.get(), [this, p] { OnReadable(*p); }));
  }
  CORDON_RETURN_IF_ERROR(reactor_.Watch(child_.pidfd.fd(), [this] { OnMainExit(); }));
  watching_child_ = true;
  if (parked_) {
    // The deadline is the command's: it is armed when one comes (Unpark).
    CORDON_RETURN_IF_ERROR(reactor_.Watch(child_.control.get(), [this] { OnParkedReadable(); }));
    watching_control_ = true;
  } else {
    CORDON_RETURN_IF_ERROR(ArmDeadline());
  }
  attached_ = true;
  return {};
}

sys::Result<void> Execution::ArmDeadline() {
  if (!timeout_) return {};
  CORDON_ASSIGN_OR_RETURN(sys::TimerFd timer, sys::TimerFd::Create());
  deadline_ = std::move(timer);
  auto elapsed = std::chrono::steady_clock::now() - child_.started;
  CORDON_RETURN_IF_ERROR(deadline_->Arm(*timeout_ - elapsed));
  return reactor_.Watch(deadline_->fd(), [this] { OnDeadline(); });
}

void Execution::OnParkedReadable() {
  char byte;
  ssize_t n = ::read(child_.control.get(), &byte, 1);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  reactor_.Unwatch(child_.control.get());
  watching_control_ = false;
  if (n != 1) return;  // the init ended: its pidfd says the rest
  parked_ready_ = true;
  if (on_parked_ready_) on_parked_ready_();
}

sys::Result<void> Execution::Unpark(const contain::Spec& spec, ExecutionOptions options,
                                    Done done) {
  on_parked_ready_ = nullptr;
  options_ = std::move(options);
  options_.exec_fd = -1;
  options_.stdin_fd = -1;
  done_ = std::move(done);
  grace_ = std::chrono::milliseconds(spec.limits.grace_ms);
  timeout_.reset();
  if (spec.limits.timeout_ms) timeout_ = std::chrono::milliseconds(*spec.limits.timeout_ms);
  out_.capture = Capture(static_cast<size_t>(spec.limits.output_limit_bytes));
  err_.capture = Capture(static_cast<size_t>(spec.limits.output_limit_bytes));
  grant_.owner = spec.owner;
  result_.grant = Summarize(grant_);
  // Its grace and verification are the command's.
  if (auto teardown =
          contain::Teardown::Create(reactor_, *tree_, signaller_,
                                    contain::TeardownOptions{grace_, options_.verify_timeout})) {
    teardown_ = std::move(*teardown);
  }

  contain::LaunchRequest command = CommandOf(spec);
  command.stdin_bytes = spec.stdin_bytes;
  command.rlimits = Rlimits(spec, grant_);
  auto sent = contain::SendCommand(child_, command);
  if (!sent) {
    child_.setup_error = contain::SetupError{contain::SetupStep::kInit, sent.error().errno_value(),
                                             sent.error().message()};
    return sent;
  }
  parked_ = false;
  return ArmDeadline();
}

bool Execution::ReadSome(Pipe& p, int max_reads) {
  char buf[64 * 1024];
  for (int i = 0; i < max_reads; ++i) {
    if (!p.fd) return false;  // closed by on_output (CloseOutput)
    ssize_t n = ::read(p.fd.get(), buf, sizeof buf);
    if (n > 0 && !options_.keep_output) {
      if (options_.on_output)
        options_.on_output(p.id, std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n > 0) {
      std::string_view kept = p.capture.Append(std::string_view(buf, static_cast<size_t>(n)));
      if (!kept.empty() && options_.on_output) options_.on_output(p.id, kept);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;  // EOF or an error: the stream is over
  }
  return true;
}

void Execution::OnReadable(Pipe& p) {
  // A bounded number of reads per wake-up keeps one chatty stream from
  // starving the other and the pidfd.
  if (ReadSome(p, 16) || !p.fd) return;
  reactor_.Unwatch(p.fd.get());
  p.fd.reset();
  std::string_view rest = p.capture.Finish();
  if (!rest.empty() && options_.on_output) options_.on_output(p.id, rest);
}

void Execution::OnMainExit() {
  auto reaped = child_.pidfd.TryReap();
  if (!reaped || !*reaped) return;  // spurious wake-up
  TakeExit(**reaped);
  reactor_.Unwatch(child_.pidfd.fd());
  watching_child_ = false;
  // What the main process left behind is torn down at once: a leftover
  // holding the pipes must not keep the run open until the deadline.
  StartTeardown(Stop::kMainExited);
}

void Execution::TakeExit(sys::ChildExit exit) {
  if (child_.init_report) {
    if (auto command = contain::ReadInitReport(child_.init_report.get())) {
      // The usage stays the init's: it covers everything it reaped.
      exit.signaled = command->signaled;
      exit.status = command->status;
      exit.core_dumped = command->core_dumped;
    }
    child_.init_report.reset();
  }
  exit_ = exit;
  exited_at_ = std::chrono::steady_clock::now();
}

void Execution::OnDeadline() {
  if (!deadline_->Consume()) return;  // a spurious wake-up (sys/reactor.h), not the deadline
  StartTeardown(Stop::kTimedOut);
}

void Execution::Cancel() {
  if (!finished_) StartTeardown(parked_ ? Stop::kDiscarded : Stop::kCancelled);
}

void Execution::CloseOutput(StreamId id) {
  Pipe& p = id == StreamId::kStdout ? out_ : err_;
  if (!p.fd) return;
  reactor_.Unwatch(p.fd.get());
  p.fd.reset();
  (void)p.capture.Finish();
}

sys::Result<void> Execution::Interrupt(int sig) {
  if (exit_ || finished_) return sys::Fail("interrupt: the main process has exited", ESRCH);
  return sys::SignalProcessGroup(child_.pidfd, child_.pgid, sig);
}

sys::Result<int> Execution::SignalGroupStartedSince(int sig, uint64_t since_ticks) {
  if (exit_ || finished_ || child_.pgid <= 1 || child_.pgid == ::getpgrp()) return 0;
  // Where a cgroup holds the tree, its members are all there is to look
  // at; elsewhere, every process of the host.
  const contain::CgroupDir* group = nullptr;
  if (grant_.cgroups) group = grant_.cgroups->v2() ? grant_.cgroups->v2() : grant_.cgroups->v1();
  CORDON_ASSIGN_OR_RETURN(std::vector<pid_t> pids, group ? group->Procs() : proc::ListPids());
  CORDON_ASSIGN_OR_RETURN(std::string boot_id, proc::BootId());
  int sent = 0;
  for (const proc::Stat& st : proc::GroupMembersSince(pids, child_.pgid, since_ticks)) {
    // Not the main process, nor, where that is a pid namespace's init, the
    // command it started (its child).
    if (st.pid == child_.identity.pid || (child_.init_report && st.ppid == child_.identity.pid)) {
      continue;
    }
    auto m = proc::SignalIdentity(proc::Identity{st.pid, st.ppid, st.start_ticks, boot_id}, sig);
    if (m && *m == proc::Mismatch::kNone) ++sent;
  }
  return sent;
}

void Execution::RetryRelease(std::function<void(const contain::Release&)> retried) {
  auto teardown = contain::Teardown::Create(
      reactor_, *tree_, signaller_,
      contain::TeardownOptions{std::chrono::milliseconds(0), options_.verify_timeout});
  if (!teardown) {
    contain::Release failed = result_.release;
    failed.problem = teardown.error().message();
    retried(failed);
    return;
  }
  teardown_ = std::move(*teardown);
  teardown_->Start(contain::TeardownMode::kImmediate, [this, retried = std::move(retried)](
                                                          const contain::Release& release) {
    result_.release = release;
    if (release.dead && grant_.cgroups) (void)grant_.cgroups->Remove();
    (void)store_.RecordRelease(grant_.id, std::string(OutcomeName(result_.outcome)),
                               contain::ToJson(release), release.dead);
    retried(release);
  });
}

void Execution::StartTeardown(Stop reason) {
  if (stop_ != Stop::kNone) return;
  stop_ = reason;
  if (deadline_) {
    reactor_.Unwatch(deadline_->fd());
    (void)deadline_->Disarm();
  }
  auto mode = reason == Stop::kMainExited || reason == Stop::kDiscarded
                  ? contain::TeardownMode::kImmediate
                  : contain::TeardownMode::kGraceful;
  teardown_->Start(mode, [this](const contain::Release& release) { OnReleased(release); });
}

void Execution::OnReleased(const contain::Release& release) {
  result_.release = release;
  if (!exit_) {
    // Dead means the main process has exited too: reap it now.
    if (auto reaped = child_.pidfd.TryReap(); reaped && *reaped) TakeExit(**reaped);
  }
  if (exit_ && watching_child_) {
    reactor_.Unwatch(child_.pidfd.fd());
    watching_child_ = false;
  }
  // Take what is still in the pipes. With the tree dead every writer is
  // gone and this ends at EOF; the bound only matters for a degraded tree
  // whose escaped member keeps writing.
  for (Pipe* p : {&out_, &err_}) {
    if (!p->fd) continue;
    ReadSome(*p, 64);
    if (!p->fd) continue;
    reactor_.Unwatch(p->fd.get());
    p->fd.reset();
    std::string_view rest = p->capture.Finish();
    if (!rest.empty() && options_.on_output) options_.on_output(p->id, rest);
  }
  Finish();
}

void Execution::Finish() {
  finished_ = true;
  auto report = [this] {
    Done done = std::move(done_);
    done(std::move(result_));
  };
  if (!options_.release_elsewhere) {
    Conclude();
    return report();
  }
  // Nothing of it changes on this thread while Conclude reads it elsewhere:
  // a main process left alive (a release not verified) is not waited for.
  if (watching_child_) {
    reactor_.Unwatch(child_.pidfd.fd());
    watching_child_ = false;
  }
  options_.release_elsewhere([this] { Conclude(); }, std::move(report));
}

void Execution::Conclude() {
  RunResult& r = result_;
  if (auto report = contain::ReadSetupReport(child_); !report) {
    r.warnings.push_back("cannot read the child's setup report: " + report.error().message());
  }
  r.setup_error = child_.setup_error;
  r.timed_out = stop_ == Stop::kTimedOut;

  uint64_t oom_kills = 0;
  if (grant_.cgroups) {
    if (auto kills = grant_.cgroups->OomKills(); kills && *kills) oom_kills = **kills;
  }
  r.oom_killed = oom_kills > 0;

  if (exit_ && !r.setup_error) {
    if (exit_->signaled) {
      r.signal = exit_->status;
    } else {
      r.exit_code = exit_->status;
    }
  }
  if (r.setup_error) {
    r.outcome = Outcome::kSetupFailed;
  } else if (stop_ == Stop::kCancelled || stop_ == Stop::kDiscarded) {
    r.outcome = Outcome::kCancelled;
  } else if (stop_ == Stop::kTimedOut) {
    r.outcome = Outcome::kTimedOut;
  } else if (r.oom_killed && r.signal == SIGKILL) {
    r.outcome = Outcome::kOomKilled;
  } else if (r.signal) {
    r.outcome = Outcome::kSignaled;
  } else {
    r.outcome = Outcome::kExited;
  }

  auto end = exit_ ? exited_at_ : std::chrono::steady_clock::now();
  r.usage.wall_ms = Ms(end - child_.started);
  if (exit_) {
    r.usage.cpu_user_ms = TimevalMs(exit_->usage.ru_utime);
    r.usage.cpu_system_ms = TimevalMs(exit_->usage.ru_stime);
    r.usage.max_rss_bytes = exit_->usage.ru_maxrss * 1024;
  }
  // The group's own accounting covers the whole tree, orphans included.
  if (grant_.cgroups) {
    if (auto cpu = grant_.cgroups->Cpu()) {
      r.usage.cpu_user_ms = static_cast<int64_t>(cpu->user_us / 1000);
      r.usage.cpu_system_ms = static_cast<int64_t>(cpu->system_us / 1000);
    }
  }
  r.out = StreamResult{out_.capture.Take(), out_.capture.truncated(), out_.capture.total_bytes()};
  r.err = StreamResult{err_.capture.Take(), err_.capture.truncated(), err_.capture.total_bytes()};

  // Release: the cgroups go and the grant is `released` only after death
  // was verified; otherwise the grant stays active, naming its survivors.
  if (r.release.dead && grant_.cgroups) {
    if (auto removed = grant_.cgroups->Remove(); !removed) {
      r.warnings.push_back("cannot remove the grant's cgroup: " + removed.error().message());
    }
  }
  if (auto recorded = store_.RecordRelease(grant_.id, std::string(OutcomeName(r.outcome)),
                                           contain::ToJson(r.release), r.release.dead);
      !recorded) {
    r.warnings.push_back("the release could not be recorded in the store: " +
                         recorded.error().message());
  }
}

}  // namespace cordon::run
