#include "api/runs.h"

#include <sys/stat.h>

#include <boost/asio/post.hpp>
#include <filesystem>

#include "api/log.h"
#include "api/requests.h"
#include "contain/grant.h"
#include "sys/json_text.h"
#include "sys/random.h"

namespace cordon::api {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

void Runs::Start(const Request& request, const std::shared_ptr<Exchange>& ex) {
  auto body = ParseObject(request.message.body());
  if (!body) return ex->RespondError(body.error());
  auto spec = ParseRun(*body);
  if (!spec) return ex->RespondError(spec.error());
  auto active = std::make_unique<Active>();
  active->exchange = ex;
  std::string accept(request.message[http::field::accept]);
  active->streaming = accept.find("application/x-ndjson") != std::string::npos;
  const bool streaming = active->streaming;
  auto id = Launch(std::move(*spec), std::move(active), request.id);
  if (!id) return ex->RespondError(id.error());
  if (streaming) ex->BeginStream(200, "application/x-ndjson");
  // A client that goes away cancels its run: teardown, recorded `cancelled`.
  ex->WatchClient([this, id = *id] {
    auto it = runs_.find(id);
    if (it == runs_.end() || !it->second->execution) return;
    Log("info", "run_client_gone", {{"grant_id", it->second->execution->grant_id()}});
    it->second->execution->Cancel();
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
  if (it == runs_.end() || !it->second->execution) return;
  it->second->execution->Cancel();
}

std::expected<uint64_t, ApiError> Runs::Launch(contain::Spec spec_value,
                                               std::unique_ptr<Active> active,
                                               const std::string& request_id) {
  contain::Spec* spec = &spec_value;
  if (auto above = contain::ApplyBounds(options_.bounds, *spec)) {
    return std::unexpected(ApiError{422, "above_ceiling", above->message, above->field, nullptr});
  }
  if (stopping_) {
    return std::unexpected(ApiError{503, "stopping", "the daemon is shutting down", "", nullptr});
  }
  if (runs_.size() >= options_.max_runs) {
    return std::unexpected(ApiError{
        429, "over_capacity",
        "at most " + std::to_string(options_.max_runs) + " runs may be in progress at once", "",
        nullptr});
  }
  active->limits = contain::LimitsJson(spec->limits);
  std::optional<contain::CapabilityStatus> disk;
  if (!spec->workspace) {
    // Nothing of the daemon's own directory: a run without a workspace gets
    // a fresh empty one, removed afterwards.
    active->scratch = options_.state_dir + "/scratch/" + sys::RandomHex(8);
    std::error_code ec;
    std::filesystem::create_directories(active->scratch, ec);
    if (!ec && ::chmod(active->scratch.c_str(), 0700) != 0) {
      ec = std::error_code(errno, std::generic_category());
    }
    if (ec) {
      // A full state directory answers 507 (FromSession), not a run that
      // fails later for want of a workspace.
      std::string why =
          "cannot create the run's workspace " + active->scratch + ": " + ec.message();
      std::filesystem::remove(active->scratch, ec);
      return std::unexpected(FromSession(
          session::Error{session::Error::Kind::kInternal, std::move(why), "", nullptr}));
    }
    spec->workspace = active->scratch;
    spec->isolation.workspace_made = true;
    // Its disk bound (a tmpfs where the state dir has no project quota);
    // admission observes it. Where bounding failed, admission is told why.
    if (spec->limits.disk_bytes || spec->limits.disk_inodes) {
      auto bound = contain::BoundWorkspace(
          probe_.disk, active->scratch, contain::WorkspaceKind::kEphemeral,
          contain::DiskLimits{spec->limits.disk_bytes, spec->limits.disk_inodes});
      if (!bound) {
        disk = contain::DiskStatus(probe_.disk, contain::WorkspaceKind::kEphemeral);
        disk->enforceable = false;
        disk->mechanism.clear();
        disk->reason = "bounding the run's workspace failed: " + bound.error().message();
      }
    }
  }
  auto grant = contain::Acquire(*spec, probe_, store_, disk ? &*disk : nullptr);
  if (!grant) {
    RemoveScratch(*active);
    return std::unexpected(FromSession(session::FromAdmit(grant.error())));
  }
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
  const uint64_t id = next_++;
  auto started = Clock::now();
  auto execution = run::Execution::Start(
      reactor_, store_, signaller_, std::move(*grant), *spec, std::move(exec_options),
      [this, id, request_id](run::RunResult r) { OnDone(id, request_id, std::move(r)); });
  if (!execution) {
    RemoveScratch(*active);
    return std::unexpected(ApiError{500, "internal", execution.error().message(), "", nullptr});
  }
  metrics_.spawn_seconds.Observe(Seconds(Clock::now() - started));
  active->execution = std::move(*execution);
  Log("info", "run_started",
      {{"request_id", request_id}, {"grant_id", run->execution->grant_id()}});
  runs_.emplace(id, std::move(active));
  return id;
}

namespace {

void ReportScratch(const std::string& scratch, const sys::Result<void>& removed) {
  if (removed) return;
  Log("error", "scratch_not_removed",
      {{"workspace", scratch}, {"error", removed.error().message()}});
}

}  // namespace

void Runs::RemoveScratch(const Active& run) {
  if (run.scratch.empty()) return;
  // Its bound first (a tmpfs is unmounted, an image deleted), then the files.
  ReportScratch(run.scratch, contain::RemoveBoundWorkspace(run.scratch));
}

void Runs::OnDone(uint64_t id, const std::string& request_id, run::RunResult r) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Active& run = *it->second;
  ++metrics_.runs_by_outcome[std::string(run::OutcomeName(r.outcome))];
  metrics_.teardown_seconds.Observe(std::chrono::duration<double>(r.release.duration).count());
  if (!r.release.dead) all_dead_ = false;
  Log(r.release.dead ? "info" : "error", "run_finished",
      {{"request_id", request_id},
       {"grant_id", r.grant.id},
       {"outcome", run::OutcomeName(r.outcome)},
       {"dead", r.release.dead}});
  if (run.scratch.empty()) return Answer(id, std::move(r));
  // Gone (with its bound) before the result is sent: a client that has the
  // result finds no mount of the run's left. On a worker, not the loop.
  workers_.Post([this, id, scratch = run.scratch, r = std::move(r),
                 alive = std::weak_ptr<char>(alive_)]() mutable {
    auto removed = contain::RemoveBoundWorkspace(scratch);
    boost::asio::post(reactor_.io(), [this, id, alive, scratch = std::move(scratch),
                                      removed = std::move(removed), r = std::move(r)]() mutable {
      if (!alive.lock()) return;
      ReportScratch(scratch, removed);
      Answer(id, std::move(r));
    });
  });
}

void Runs::Answer(uint64_t id, run::RunResult r) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Active& run = *it->second;
  if (run.done) {
    auto done = std::move(run.done);
    run.done = nullptr;
    done(std::move(r));
  } else {
    Respond(run, std::move(r));
  }
  // The Execution may still be on the stack (OnDone): destroy it from the loop.
  boost::asio::post(reactor_.io(), [alive = std::weak_ptr<char>(alive_), this, id] {
    if (!alive.lock()) return;
    runs_.erase(id);
    if (runs_.empty() && drained_) {
      auto drained = std::move(drained_);
      drained_ = nullptr;
      drained(all_dead_);
    }
  });
}

void Runs::Respond(Active& run, run::RunResult r) {
  // The output is moved, not copied, from the result into the JSON, whose
  // text, written once into a buffer of its own, is the only other copy: a
  // run that printed to its cap costs the daemon about twice the cap.
  std::string out = std::move(r.out.data), err = std::move(r.err.data);
  // Text output escapes to a little more than itself ("\n" is two bytes).
  const size_t expected = 2 * (out.size() + err.size()) + 4096;
  json result = run::ToJson(r);
  result["stdout"] = std::move(out);
  result["stderr"] = std::move(err);
  result["limits"] = run.limits;
  if (run.streaming) result["type"] = "result";
  std::string text = sys::JsonLine(result, expected);
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
  if (runs_.empty()) return drained(all_dead_);
  drained_ = std::move(drained);
  for (auto& [id, run] : runs_) {
    if (run->execution) run->execution->Cancel();
  }
}

}  // namespace cordon::api
