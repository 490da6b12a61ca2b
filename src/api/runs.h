// POST /v1/runs: one-shot runs on the daemon's loop. Each is a
// run::Execution on the AsioReactor (the same pump as `cordon run`), answered
// whole or streamed as NDJSON; a client that goes away cancels its run. A
// sandbox is made and launched on a worker thread (its workspace, its
// grant's record and cgroups, its process: the costly part, and the part
// that waits for the kernel); the loop admits, supervises and answers.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "api/asio_reactor.h"
#include "api/http.h"
#include "api/metrics.h"
#include "contain/bounds.h"
#include "contain/probe.h"
#include "contain/signaller.h"
#include "run/execution.h"
#include "store/store.h"
#include "sys/backoff.h"
#include "sys/workers.h"

namespace cordon::api {

struct RunsOptions {
  std::string state_dir;  // scratch workspaces go in <state>/scratch
  size_t max_runs = 32;
  std::chrono::milliseconds verify_timeout{5000};
  contain::Bounds bounds;  // every run's default limits and their ceilings
  // Sandboxes kept made and waiting for a command (--prespawn-runs, the
  // warm pool): a run that declares no isolation, limits or workspace of
  // its own starts in one instead of being launched.
  size_t prespawn = 0;
  // How often a run whose teardown could not be verified is torn down
  // again, until it is.
  std::chrono::milliseconds retry_every{1000};
};

class Runs final {
 public:
  using Clock = std::chrono::steady_clock;

  // Everything passed must outlive the Runs.
  Runs(AsioReactor& reactor, store::Store& store, contain::Signaller& signaller,
       const contain::Probe& probe, Metrics& metrics, RunsOptions options)
      : reactor_(reactor),
        store_(store),
        signaller_(signaller),
        probe_(probe),
        metrics_(metrics),
        options_(std::move(options)),
        pool_timer_(reactor.io()),
        retry_timer_(reactor.io()) {}

  // Fills the warm pool (once the daemon is up; again after each hand-out).
  void FillPool();
  // Parked sandboxes ready for a run.
  size_t warm() const;
  void Start(const Request& request, const std::shared_ptr<Exchange>& exchange);

  // The same admission and engine as Start, for a spec parsed elsewhere (the
  // MCP tools, src/mcp): `done` gets the result, or the error that refused
  // the run: before Submit returns (which then returns 0) when admission
  // refuses it, later when making its sandbox does (its workspace, its
  // grant). Returns the run's id, for Cancel. `output`, when set, sees each
  // chunk of output as it is captured (MCP's progress notifications).
  using Done = std::function<void(std::expected<run::RunResult, ApiError>)>;
  using Output = std::function<void(run::StreamId stream, std::string_view bytes)>;
  uint64_t Submit(contain::Spec spec, const std::string& request_id, Done done,
                  Output output = nullptr);
  // Tears a run down (recorded `cancelled`), once it is launched if it is
  // being launched; its result still comes.
  void Cancel(uint64_t id);

  // Cancels every run; `drained(all_dead)` once none is left.
  void Stop(std::function<void(bool)> drained);
  size_t active() const { return runs_.size(); }
  // Answered runs whose teardown could not be verified yet: their grants
  // stay active, and their trees are torn down again every retry_every,
  // and once more at Stop.
  size_t unreleased() const { return unreleased_.size(); }
  // What the MCP server shares with the runs: the loop (its timers) and
  // the counters of /metrics.
  AsioReactor& reactor() { return reactor_; }
  Metrics& metrics() { return metrics_; }

 private:
  struct Active {
    std::shared_ptr<Exchange> exchange;         // null for a Submit
    Done done;                                  // a Submit's; null for Start
    Output output;                              // a Submit's, or null
    std::unique_ptr<run::Execution> execution;  // null while it is launched
    std::string scratch;                        // a workspace made for the run, removed afterwards
    bool streaming = false;
    bool warm = false;       // it ran in a sandbox of the warm pool
    bool cancelled = false;  // cancelled before it had an execution
    nlohmann::json limits;   // the effective limits, shown in the result
  };
  // A cold run as a worker made it: its execution, not yet attached.
  struct Spawned {
    std::unique_ptr<run::Execution> execution;
    std::string scratch;
  };
  std::expected<uint64_t, ApiError> Launch(contain::Spec spec, std::unique_ptr<Active> active,
                                           const std::string& request_id);
  // On a worker: the run's workspace, grant and process. It and
  // SpawnParked read only what never changes (the options, the probe) and
  // use the store (whose calls are one at a time) and the seccomp cache.
  std::expected<Spawned, ApiError> SpawnCold(contain::Spec spec, run::ExecutionOptions options,
                                             run::Execution::Done done);
  // Back on the loop: the run supervised, or refused.
  void OnSpawned(uint64_t id, const std::string& request_id, Clock::time_point started,
                 std::expected<Spawned, ApiError> spawned);
  // The run has its execution: counted, logged, its stream begun, and
  // cancelled if that was asked meanwhile.
  void Begun(Active& run, const std::string& request_id, Clock::time_point started);
  void OnDone(uint64_t id, const std::string& request_id, run::RunResult result);
  // Once the run's workspace is gone: the result to its caller.
  void Answer(uint64_t id, run::RunResult result);
  // The result as POST /v1/runs answers it, whole or as the stream's end.
  static void Respond(Active& run, run::RunResult result);
  // A fresh empty workspace for `spec`, bounded by its disk limits: a
  // directory (set as its workspace; its path) or a tmpfs in the sandbox's
  // own mount namespace (its isolation's private_workspace; ""). `disk` is
  // the disk bound's status where the caller cannot observe it as usual.
  std::expected<std::string, ApiError> MakeScratch(
      contain::Spec& spec, std::optional<contain::CapabilityStatus>& disk) const;

  // The warm pool. Each entry is a grant (owner `run-pool`) whose sandbox
  // waits for a command in a scratch workspace of its own.
  struct Parked {
    std::unique_ptr<run::Execution> execution;
    std::string scratch;  // "": its workspace is private (contain::IsolationSpec)
  };
  bool MatchesPool(const contain::Spec& spec) const;
  // The spec a pool sandbox is admitted with: the defaults and the bounds.
  contain::Spec PoolSpec() const;
  // A pool sandbox made on a worker (SpawnParked), attached on the loop
  // (OnParkedSpawned). `key` is its entry's.
  void StartParked();
  std::expected<Parked, std::string> SpawnParked(uint64_t key);
  void OnParkedSpawned(uint64_t key, std::expected<Parked, std::string> parked);
  // A ready parked sandbox for `spec`, its grant recorded as the run's;
  // `spec` and `run` get its workspace. Null when none is ready.
  std::unique_ptr<run::Execution> TakeParked(contain::Spec& spec, Active& run);
  void OnParkedEnded(uint64_t key, const run::RunResult& result);
  // After a pool sandbox failed: the next fill waits (1 s, doubling to 1 min).
  void PoolFailed();
  void MaybeDrained();
  // An answered run whose teardown was not verified: kept, and retried.
  // Its scratch workspace, which its survivors may use, is kept with it.
  struct Unreleased {
    std::unique_ptr<run::Execution> execution;
    std::string scratch;
    bool retrying = false;     // or its workspace being removed
    bool retry_again = false;  // Stop's last try, asked for while one was under way
  };
  void Keep(uint64_t id, std::unique_ptr<run::Execution> execution, std::string scratch);
  void ArmRetries();  // every retry_every while any is kept
  void RetryRelease(uint64_t id);

  AsioReactor& reactor_;
  store::Store& store_;
  contain::Signaller& signaller_;
  const contain::Probe& probe_;
  Metrics& metrics_;
  RunsOptions options_;
  std::map<uint64_t, std::unique_ptr<Active>> runs_;
  uint64_t next_ = 1;
  bool stopping_ = false;
  bool all_dead_ = true;
  std::function<void(bool)> drained_;
  std::map<uint64_t, Parked> pool_;
  size_t pool_spawning_ = 0;  // pool sandboxes being made on a worker
  uint64_t next_parked_ = 1;
  sys::Backoff pool_backoff_;
  boost::asio::steady_timer pool_timer_;  // the fill after a backoff
  std::map<uint64_t, Unreleased> unreleased_;
  std::vector<std::unique_ptr<run::Execution>> released_;  // at last; destroyed from the loop
  boost::asio::steady_timer retry_timer_;                  // the next round (ArmRetries)
  // Expires with this object: what it posts to the loop checks it first.
  std::shared_ptr<char> alive_ = std::make_shared<char>();
  // Make and launch the sandboxes, end their teardown, and remove the runs'
  // workspaces (an unmount waits for an RCU grace period, a deletion for
  // the disk): work the loop would otherwise spend, or spend waiting. Last:
  // destroyed first, finishing what it was given (what it posts back is
  // dropped).
  sys::Offload offload_{4, reactor_.Poster()};
};

}  // namespace cordon::api
