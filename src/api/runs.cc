#include "api/runs.h"

#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <filesystem>

#include "api/log.h"
#include "api/requests.h"
#include "contain/grant.h"
#include "sys/json_text.h"
#include "sys/random.h"

namespace cordon::api {

using nlohmann::json;
namespace {

// A run's scratch workspace removed, its bound first (a tmpfs is
// unmounted, an image deleted), then the files; a failure is logged. It
// may wait on the kernel: from a worker, or where nothing else waits. From
// any thread (a log line is one write).
void RemoveScratch(const std::string& scratch) {
  if (scratch.empty()) return;
  auto removed = contain::RemoveBoundWorkspace(scratch);
  if (removed) return;
  Log("error", "scratch_not_removed",
      {{"workspace", scratch}, {"error", removed.error().message()}});
}

// A workspace an HTTP client names is shown read-write inside (or is the
// working directory of an unisolated run): not the host's pseudo-
// filesystems, nor the daemon's own state (its token, its store) or a
// directory above it. Links are followed, as the mount would.
std::optional<std::string> WorkspaceProblem(const std::filesystem::path& workspace,
                                            const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::weakly_canonical(workspace, ec);
  if (ec) return std::nullopt;  // Validate said why, or the launch will
  auto beneath = [](const std::filesystem::path& path, const std::filesystem::path& dir) {
    auto d = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end()).first;
    return d == dir.end() || (std::next(d) == dir.end() && d->empty());
  };
  for (const char* pseudo : {"/proc", "/sys", "/dev"}) {
    if (beneath(resolved, pseudo)) {
      return "is " + resolved.string() + ", beneath " + pseudo +
             ": the host's own, not a workspace";
    }
  }
  std::filesystem::path state = std::filesystem::weakly_canonical(state_dir, ec);
  if (!ec && !state_dir.empty() && beneath(state, resolved)) {
    return "is " + resolved.string() +
           ", which holds the daemon's state directory (its token and its store)";
  }
  return std::nullopt;
}

}  // namespace

void Runs::Start(const Request& request, const std::shared_ptr<Exchange>& ex) {
  auto body = ParseObject(request.message.body());
  if (!body) return ex->RespondError(body.error());
  auto spec = ParseRun(*body);
  if (!spec) return ex->RespondError(spec.error());
  auto active = std::make_unique<Active>();
  active->exchange = ex;
  std::string accept(request.message[http::field::accept]);
  active->streaming = accept.find("application/x-ndjson") != std::string::npos;
  auto id = Launch(std::move(*spec), std::move(active), request.id);
  if (!id) return ex->RespondError(id.error());
  // A client that goes away cancels its run: teardown, recorded `cancelled`.
  ex->WatchClient([this, id = *id] {
    auto it = runs_.find(id);
    if (it == runs_.end()) return;
    const run::Execution* execution = it->second->execution.get();
    Log("info", "run_client_gone", {{"grant_id", execution ? execution->grant_id() : ""}});
    Cancel(id);
  });
}

uint64_t Runs::Submit(contain::Spec spec, const std::string& request_id, Done done, Output output) {
  auto active = std::make_unique<Active>();
  active->done = done;
  active->output = std::move(output);
  auto id = Launch(std::move(spec), std::move(active), request_id);
  if (!id) {
    done(std::unexpected(id.error()));
    return 0;
  }
  return *id;
}

void Runs::Cancel(uint64_t id) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  if (!it->second->execution) {
    it->second->cancelled = true;  // being launched: Begun cancels it
    return;
  }
  it->second->execution->Cancel();
}

std::expected<uint64_t, ApiError> Runs::Launch(contain::Spec spec, std::unique_ptr<Active> active,
                                               const std::string& request_id) {
  if (auto above = contain::ApplyBounds(options_.bounds, spec)) {
    return std::unexpected(ApiError{422, "above_ceiling", above->message, above->field, nullptr});
  }
  if (stopping_) {
    return std::unexpected(ApiError{503, "stopping", "the daemon is shutting down", "", nullptr});
  }
  // A run whose teardown is not verified yet still has processes: it is
  // held against the bound until its death is.
  if (runs_.size() + unreleased_.size() >= options_.max_runs) {
    std::string message =
        "at most " + std::to_string(options_.max_runs) + " runs may be in progress at once";
    if (!unreleased_.empty()) {
      message += " (" + std::to_string(unreleased_.size()) +
                 " of them answered, their teardown not yet verified; it is retried in the "
                 "background)";
    }
    return std::unexpected(ApiError{429, "over_capacity", std::move(message), "", nullptr});
  }
  // What admission checks first (Acquire): a bad field is refused, naming
  // it, before any sandbox is taken or made.
  if (auto invalid = contain::Validate(spec)) {
    return std::unexpected(FromSession(session::FromAdmit(contain::AdmitError{
        contain::AdmitError::Kind::kInvalid, invalid->field, invalid->message(), {}})));
  }
  if (spec.workspace && spec.isolation.enabled()) {
    if (auto problem = WorkspaceProblem(*spec.workspace, options_.state_dir)) {
      return std::unexpected(Invalid("workspace", *problem));
    }
  }
  active->limits = contain::LimitsJson(spec.limits);
  Active* run = active.get();
  run::ExecutionOptions exec_options;
  exec_options.verify_timeout = options_.verify_timeout;
  exec_options.on_output = [this, run](run::StreamId id, std::string_view bytes) {
    metrics_.bytes_captured += bytes.size();
    if (run->output) run->output(id, bytes);
    if (!run->streaming) return;
    json event = {{"type", id == run::StreamId::kStdout ? "stdout" : "stderr"},
                  {"data", std::string(bytes)}};
    run->exchange->Stream(sys::JsonText(event) + "\n");
  };
  // Its end (the cgroups' accounting read, the groups removed, the release
  // recorded) on a worker, and its answer back on the loop.
  exec_options.release_elsewhere = run::ReleaseOn(offload_);
  const uint64_t id = next_++;
  auto on_done = [this, id, request_id](run::RunResult r) { OnDone(id, request_id, std::move(r)); };
  auto started = Clock::now();
  std::unique_ptr<run::Execution> warm;
  if (MatchesPool(spec)) warm = TakeParked(spec, *active);
  if (warm) {
    run::Execution* execution = warm.get();
    active->execution = std::move(warm);
    runs_.emplace(id, std::move(active));
    if (auto unparked = execution->Unpark(spec, std::move(exec_options), on_done); !unparked) {
      // Its setup failure (at `init`) is the run's result, once it is torn
      // down: from the loop, since the teardown may end at once.
      Log("error", "run_unpark_failed",
          {{"grant_id", execution->grant_id()}, {"error", unparked.error().message()}});
      boost::asio::post(reactor_.io(), [this, id, alive = std::weak_ptr<char>(alive_)] {
        if (!alive.lock()) return;
        if (auto it = runs_.find(id); it != runs_.end()) it->second->execution->Cancel();
      });
    }
    Begun(*run, request_id, started);
    return id;
  }
  // A cold run: made on a worker, supervised on the loop once it is.
  runs_.emplace(id, std::move(active));
  offload_(
      [this, spec = std::move(spec), exec_options = std::move(exec_options),
       on_done = std::move(on_done)]() mutable {
        return SpawnCold(std::move(spec), std::move(exec_options), std::move(on_done));
      },
      [this, id, request_id, started](std::expected<Spawned, ApiError> spawned) {
        OnSpawned(id, request_id, started, std::move(spawned));
      });
  return id;
}

std::expected<Runs::Spawned, ApiError> Runs::SpawnCold(contain::Spec spec,
                                                       run::ExecutionOptions options,
                                                       run::Execution::Done done) {
  Spawned spawned;
  std::optional<contain::CapabilityStatus> disk;
  if (!spec.workspace) {
    // Nothing of the daemon's own directory: a run without a workspace gets
    // a fresh empty one, removed afterwards.
    auto scratch = MakeScratch(spec, disk);
    if (!scratch) return std::unexpected(scratch.error());
    spawned.scratch = std::move(*scratch);
  }
  auto failed = [&](ApiError error) {
    RemoveScratch(spawned.scratch);
    return std::unexpected(std::move(error));
  };
  auto grant = contain::Acquire(spec, probe_, store_, disk ? &*disk : nullptr);
  if (!grant) return failed(FromSession(session::FromAdmit(grant.error())));
  auto execution = run::Execution::Spawn(reactor_, store_, signaller_, std::move(*grant), spec,
                                         std::move(options), std::move(done));
  if (!execution) {
    return failed(ApiError{500, "internal", execution.error().message(), "", nullptr});
  }
  spawned.execution = std::move(*execution);
  return spawned;
}

void Runs::OnSpawned(uint64_t id, const std::string& request_id, Clock::time_point started,
                     std::expected<Spawned, ApiError> spawned) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Active& run = *it->second;
  if (spawned) {
    run.scratch = std::move(spawned->scratch);
    run.execution = std::move(spawned->execution);
    if (auto attached = run.execution->Attach(); !attached) {
      RemoveScratch(run.scratch);
      spawned = std::unexpected(ApiError{500, "internal", attached.error().message(), "", nullptr});
    }
  }
  if (!spawned) {
    // Refused (or failed) as it was made: nothing of it runs.
    std::unique_ptr<Active> refused = std::move(it->second);
    runs_.erase(it);
    if (refused->done) {
      refused->done(std::unexpected(spawned.error()));
    } else {
      refused->exchange->RespondError(spawned.error());
    }
    return MaybeDrained();
  }
  Begun(run, request_id, started);
}

void Runs::Begun(Active& run, const std::string& request_id, Clock::time_point started) {
  metrics_.spawn_seconds.Observe(Seconds(Clock::now() - started));
  Log("info", "run_started",
      {{"request_id", request_id}, {"grant_id", run.execution->grant_id()}, {"warm", run.warm}});
  if (run.streaming) run.exchange->BeginStream(200, "application/x-ndjson");
  if (run.cancelled || stopping_) run.execution->Cancel();
}

std::expected<std::string, ApiError> Runs::MakeScratch(
    contain::Spec& spec, std::optional<contain::CapabilityStatus>& disk) const {
  // Where the scratch would be a bounded tmpfs anyway, a namespaced
  // sandbox's is a tmpfs of its own with the same bounds, mounted in its
  // mount namespace (its setup fails if the kernel refuses them): nothing on
  // the host to make now or to remove before the run's answer (a umount and
  // an rmdir, each waiting out an RCU grace period).
  if (spec.isolation.enabled() && probe_.isolation.namespaces.available &&
      (spec.limits.disk_bytes || spec.limits.disk_inodes)) {
    contain::CapabilityStatus tmpfs =
        contain::DiskStatus(probe_.disk, contain::WorkspaceKind::kEphemeral);
    if (tmpfs.enforceable && tmpfs.mechanism == "tmpfs") {
      spec.isolation.private_workspace = true;
      disk = std::move(tmpfs);
      return "";
    }
  }
  std::string scratch = options_.state_dir + "/scratch/" + sys::RandomHex(8);
  std::error_code ec;
  std::filesystem::create_directories(scratch, ec);
  if (!ec && ::chmod(scratch.c_str(), 0700) != 0) {
    ec = std::error_code(errno, std::generic_category());
  }
  if (ec) {
    // A full state directory answers 507 (FromSession), not a run that
    // fails later for want of a workspace.
    std::string why = "cannot create the run's workspace " + scratch + ": " + ec.message();
    std::filesystem::remove(scratch, ec);
    return std::unexpected(
        FromSession(session::Error{session::Error::Kind::kInternal, std::move(why), "", nullptr}));
  }
  spec.workspace = scratch;
  spec.isolation.workspace_made = true;
  // Its disk bound (a tmpfs where the state dir has no project quota);
  // admission observes it. Where bounding failed, admission is told why.
  if (spec.limits.disk_bytes || spec.limits.disk_inodes) {
    auto bound = contain::BoundWorkspace(
        probe_.disk, scratch, contain::WorkspaceKind::kEphemeral,
        contain::DiskLimits{spec.limits.disk_bytes, spec.limits.disk_inodes});
    if (!bound && contain::NoRoom(bound.error())) {
      RemoveScratch(scratch);
      return std::unexpected(FromSession(session::Error{
          session::Error::Kind::kInternal,
          "cannot bound the run's workspace: " + bound.error().message(), "", nullptr}));
    }
    if (!bound) {
      disk = contain::DiskStatus(probe_.disk, contain::WorkspaceKind::kEphemeral);
      disk->enforceable = false;
      disk->mechanism.clear();
      disk->reason = "bounding the run's workspace failed: " + bound.error().message();
    }
  }
  return scratch;
}

contain::Spec Runs::PoolSpec() const {
  contain::Spec spec;
  (void)contain::ApplyBounds(options_.bounds, spec);  // the defaults are never refused
  spec.argv = {"(warm: waits for a run)"};            // recorded until a run takes it
  spec.owner = "run-pool";
  return spec;
}

// A parked sandbox was made for the defaults: a run matches when it asks for
// nothing else that is fixed before the command (its deadline, grace and
// output cap are the supervisor's, and come with the command).
bool Runs::MatchesPool(const contain::Spec& spec) const {
  if (options_.prespawn == 0 || spec.workspace) return false;
  const contain::Spec pool = PoolSpec();
  contain::Limits limits = spec.limits;
  limits.timeout_ms = pool.limits.timeout_ms;
  limits.grace_ms = pool.limits.grace_ms;
  limits.output_limit_bytes = pool.limits.output_limit_bytes;
  const contain::IsolationSpec& a = spec.isolation;
  const contain::IsolationSpec& b = pool.isolation;
  return b.enabled() && spec.required.empty() && !spec.permissive &&
         spec.defaulted == pool.defaulted &&
         contain::LimitsJson(limits) == contain::LimitsJson(pool.limits) && a.level == b.level &&
         a.network == b.network && a.binds.empty() && a.tmp_size_bytes == b.tmp_size_bytes &&
         a.id_range == b.id_range && a.system_dirs == b.system_dirs &&
         a.hidden_paths == b.hidden_paths && a.seccomp_deny == b.seccomp_deny;
}

size_t Runs::warm() const {
  return static_cast<size_t>(std::count_if(pool_.begin(), pool_.end(), [](const auto& e) {
    return e.second.execution && e.second.execution->parked_ready();
  }));
}

void Runs::FillPool() {
  if (stopping_ || options_.prespawn == 0 || !probe_.isolation.namespaces.available) return;
  if (pool_backoff_.waiting()) return;
  while (pool_.size() + pool_spawning_ < options_.prespawn) StartParked();
}

void Runs::StartParked() {
  const uint64_t key = next_parked_++;
  ++pool_spawning_;
  offload_([this, key] { return SpawnParked(key); },
           [this, key](std::expected<Parked, std::string> parked) {
             OnParkedSpawned(key, std::move(parked));
           });
}

std::expected<Runs::Parked, std::string> Runs::SpawnParked(uint64_t key) {
  contain::Spec spec = PoolSpec();
  std::optional<contain::CapabilityStatus> disk;
  auto made = MakeScratch(spec, disk);
  if (!made) return std::unexpected(made.error().message);
  std::string scratch = std::move(*made);  // "" for a private workspace
  auto failed = [&](std::string why) {
    RemoveScratch(scratch);
    return std::unexpected(std::move(why));
  };
  auto grant = contain::Acquire(spec, probe_, store_, disk ? &*disk : nullptr);
  if (!grant) return failed(grant.error().message);
  // Both callbacks come on the loop, once the execution is attached.
  auto parked = run::Execution::SpawnParked(
      reactor_, store_, signaller_, std::move(*grant), spec, [this] { pool_backoff_.Succeeded(); },
      [this, key](run::RunResult r) { OnParkedEnded(key, r); });
  if (!parked) return failed(parked.error().message());  // its grant was released
  return Parked{std::move(*parked), std::move(scratch)};
}

void Runs::OnParkedSpawned(uint64_t key, std::expected<Parked, std::string> parked) {
  --pool_spawning_;
  if (parked) {
    run::Execution* execution = parked->execution.get();
    auto it = pool_.emplace(key, std::move(*parked)).first;
    if (auto attached = execution->Attach(); !attached) {
      RemoveScratch(it->second.scratch);
      pool_.erase(it);
      parked = std::unexpected(attached.error().message());
    } else if (stopping_) {
      execution->Cancel();  // it goes as the rest of the pool went
    }
  }
  if (!parked) {
    Log("error", "pool_run_failed", {{"error", parked.error()}});
    // One wait for the failures of one fill.
    if (!pool_backoff_.waiting()) PoolFailed();
    MaybeDrained();
  }
}

std::unique_ptr<run::Execution> Runs::TakeParked(contain::Spec& spec, Active& run) {
  auto it = std::find_if(pool_.begin(), pool_.end(),
                         [](const auto& e) { return e.second.execution->parked_ready(); });
  if (it == pool_.end() || !run::Execution::FitsParked(spec)) return nullptr;
  contain::Spec taken = spec;
  if (it->second.scratch.empty()) {
    taken.isolation.private_workspace = true;
  } else {
    taken.workspace = it->second.scratch;
    taken.isolation.workspace_made = true;
  }
  // The grant is the run's, in the store, before its command exists.
  const std::string& grant_id = it->second.execution->grant_id();
  if (auto handed = store_.HandOutGrant(grant_id, taken.owner, contain::SpecSummary(taken));
      !handed) {
    Log("error", "store_error", {{"grant_id", grant_id}, {"error", handed.error().message()}});
    return nullptr;
  }
  spec = std::move(taken);
  run.scratch = std::move(it->second.scratch);
  run.warm = true;
  auto execution = std::move(it->second.execution);
  pool_.erase(it);
  return execution;
}

void Runs::OnParkedEnded(uint64_t key, const run::RunResult& r) {
  auto it = pool_.find(key);
  if (it == pool_.end()) return;
  if (!r.release.dead) all_dead_ = false;
  if (!stopping_) {
    // It ended while it waited (killed from outside, or its setup failed).
    Log("error", "pool_run_ended",
        {{"grant_id", r.grant.id},
         {"outcome", run::OutcomeName(r.outcome)},
         {"setup_error", r.setup_error ? r.setup_error->detail : ""}});
    PoolFailed();
  }
  // Its workspace goes on a worker (a private one went with its sandbox);
  // the entry (whose Execution is on the stack now) once that is done.
  auto erase = [this, key, alive = std::weak_ptr<char>(alive_)] {
    if (!alive.lock()) return;
    pool_.erase(key);
    if (!stopping_) FillPool();
    MaybeDrained();
  };
  if (it->second.scratch.empty()) return boost::asio::post(reactor_.io(), erase);
  offload_([scratch = it->second.scratch] { RemoveScratch(scratch); }, erase);
}

void Runs::PoolFailed() {
  const auto delay = pool_backoff_.Failed();
  Log("info", "pool_backoff", {{"kind", "run"}, {"retry_in_ms", delay.count()}});
  pool_timer_.expires_after(delay);
  pool_timer_.async_wait([this, alive = std::weak_ptr<char>(alive_)](const auto& ec) {
    if (!ec && alive.lock()) FillPool();
  });
}

void Runs::MaybeDrained() {
  if (!runs_.empty() || !pool_.empty() || pool_spawning_ > 0 || !drained_) return;
  for (const auto& [id, u] : unreleased_) {
    if (u.retrying) return;
  }
  // Runs still unreleased after the stop's last try: their workspaces go,
  // as every run's does (the next daemon reaps what is left of the trees).
  std::vector<uint64_t> ids;
  std::vector<std::string> scratches;
  for (auto& [id, u] : unreleased_) {
    if (u.scratch.empty()) continue;
    ids.push_back(id);
    scratches.push_back(std::exchange(u.scratch, {}));
    u.retrying = true;
  }
  if (!scratches.empty()) {
    return offload_(
        [scratches = std::move(scratches)] {
          for (const std::string& scratch : scratches) RemoveScratch(scratch);
        },
        [this, ids = std::move(ids), alive = std::weak_ptr<char>(alive_)] {
          if (!alive.lock()) return;
          for (uint64_t id : ids) {
            if (auto it = unreleased_.find(id); it != unreleased_.end())
              it->second.retrying = false;
          }
          MaybeDrained();
        });
  }
  auto drained = std::move(drained_);
  drained_ = nullptr;
  drained(all_dead_ && unreleased_.empty());
}

void Runs::Keep(uint64_t id, std::unique_ptr<run::Execution> execution, std::string scratch) {
  unreleased_.emplace(id, Unreleased{std::move(execution), std::move(scratch)});
  if (stopping_) return RetryRelease(id);  // the stop's last try
  if (unreleased_.size() == 1) ArmRetries();
}

void Runs::ArmRetries() {
  retry_timer_.expires_after(options_.retry_every);
  retry_timer_.async_wait([this, alive = std::weak_ptr<char>(alive_)](const auto& ec) {
    if (ec || !alive.lock()) return;
    // Collected first: a retry that ends at once takes its entry out.
    std::vector<uint64_t> ids;
    for (const auto& [id, u] : unreleased_) ids.push_back(id);
    for (uint64_t id : ids) RetryRelease(id);
    if (!unreleased_.empty() && !stopping_) ArmRetries();
  });
}

void Runs::RetryRelease(uint64_t id) {
  auto it = unreleased_.find(id);
  if (it == unreleased_.end() || it->second.retrying) return;
  it->second.retrying = true;
  it->second.execution->RetryRelease([this, id](const contain::Release& release) {
    auto it = unreleased_.find(id);
    if (it == unreleased_.end()) return;
    Unreleased& u = it->second;
    u.retrying = false;
    metrics_.teardown_seconds.Observe(std::chrono::duration<double>(release.duration).count());
    if (!release.dead) {
      if (std::exchange(u.retry_again, false)) return RetryRelease(id);
      return MaybeDrained();
    }
    Log("info", "run_released", {{"grant_id", u.execution->grant_id()}, {"late", true}});
    // This is the Execution's own callback: it is destroyed from the loop.
    released_.push_back(std::move(u.execution));
    boost::asio::post(reactor_.io(), [this, alive = std::weak_ptr<char>(alive_)] {
      if (alive.lock()) released_.clear();
    });
    auto forget = [this, id, alive = std::weak_ptr<char>(alive_)] {
      if (!alive.lock()) return;
      unreleased_.erase(id);
      MaybeDrained();
    };
    if (u.scratch.empty()) return forget();
    // Its workspace goes now (on a worker), the entry after it.
    u.retrying = true;
    offload_([scratch = std::exchange(u.scratch, {})] { RemoveScratch(scratch); },
             std::move(forget));
  });
}

void Runs::OnDone(uint64_t id, const std::string& request_id, run::RunResult r) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Active& run = *it->second;
  ++metrics_.runs_by_outcome[std::string(run::OutcomeName(r.outcome))];
  metrics_.teardown_seconds.Observe(std::chrono::duration<double>(r.release.duration).count());
  Log(r.release.dead ? "info" : "error", "run_finished",
      {{"request_id", request_id},
       {"grant_id", r.grant.id},
       {"outcome", run::OutcomeName(r.outcome)},
       {"dead", r.release.dead}});
  // A tree not verified dead keeps its workspace until it is (Keep).
  if (run.scratch.empty() || !r.release.dead) return Answer(id, std::move(r));
  // Gone (with its bound) before the result is sent: a client that has the
  // result finds no mount of the run's left. On a worker, not the loop.
  offload_([scratch = run.scratch] { RemoveScratch(scratch); },
           [this, id, r = std::move(r)]() mutable { Answer(id, std::move(r)); });
}

void Runs::Answer(uint64_t id, run::RunResult r) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Active& run = *it->second;
  const bool dead = r.release.dead;
  if (run.done) {
    auto done = std::move(run.done);
    run.done = nullptr;
    done(std::move(r));
  } else {
    Respond(run, std::move(r));
  }
  // The Execution may still be on the stack (OnDone): destroy it from the
  // loop, or keep it while its tree is not verified dead. The pool refills
  // after the answer, not before it.
  boost::asio::post(reactor_.io(), [alive = std::weak_ptr<char>(alive_), this, id, dead] {
    if (!alive.lock()) return;
    auto it = runs_.find(id);
    if (it != runs_.end() && !dead && it->second->execution) {
      Keep(id, std::move(it->second->execution), std::move(it->second->scratch));
    }
    runs_.erase(id);
    FillPool();
    MaybeDrained();
  });
}

void Runs::Respond(Active& run, run::RunResult r) {
  // The output is moved, not copied, from the result into the JSON, whose
  // text, written once into a buffer of its own, is the only other copy: a
  // run that printed to its cap costs the daemon about twice the cap.
  std::string out = std::move(r.out.data), err = std::move(r.err.data);
  const size_t output_bytes = out.size() + err.size();
  json result = run::ToJson(r);
  result["stdout"] = std::move(out);
  result["stderr"] = std::move(err);
  result["limits"] = run.limits;
  result["warm"] = run.warm;
  if (run.streaming) result["type"] = "result";
  std::string text = sys::JsonLine(result, output_bytes);
  result = nullptr;
  if (run.streaming) {
    run.exchange->Stream(std::move(text));
    run.exchange->EndStream();
  } else {
    run.exchange->Respond(200, std::move(text), "application/json");
  }
}

void Runs::Stop(std::function<void(bool)> drained) {
  stopping_ = true;
  pool_timer_.cancel();
  retry_timer_.cancel();
  // One being launched is cancelled once it is (Begun, OnParkedSpawned).
  for (auto& [id, run] : runs_) {
    if (run->execution) run->execution->Cancel();
  }
  // Collected first: a teardown that ends at once changes nothing here
  // (the entries go from the loop, once their workspaces are removed).
  std::vector<run::Execution*> parked;
  for (auto& [key, entry] : pool_) parked.push_back(entry.execution.get());
  for (run::Execution* e : parked) e->Cancel();
  // A run whose tree was not verified dead gets one more try: what kept it
  // alive may be gone since the last one.
  std::vector<uint64_t> ids;  // collected first, as above
  for (auto& [id, u] : unreleased_) {
    if (u.retrying) {
      u.retry_again = true;  // that one may have begun before the cause went
    } else {
      ids.push_back(id);
    }
  }
  for (uint64_t id : ids) RetryRelease(id);
  // Set last: nothing above can end the stop before all of it has begun.
  drained_ = std::move(drained);
  MaybeDrained();
}

}  // namespace cordon::api
