// The daemon's sessions (DESIGN.md §2): one state machine per id, kept in
// the store, each runtime (a Shell, or a Jupyter kernel for kind `python`)
// inside the containment boundary.
//
//   starting -> ready <-> busy -> closed
//   ready/busy -> invalidated   (the timeout ladder, or the shell died idle)
//   any live   -> quarantined   (teardown could not be verified; retried in
//                                the background and whenever the id is
//                                touched, then closed)
//   live at a daemon crash -> lost (found at restart; the tree is reaped by
//                                   contain::Reap, the workspace kept)
// `busy` is only kept in memory (it flips with every execution; after a crash
// ready and busy both become lost). A new generation of an id starts from
// closed, invalidated or lost. Every
// callback carries the generation it belongs to, so the cleanup of an old
// generation never touches a newer one.
//
// Everything runs on one Reactor (the daemon's loop); nothing here blocks
// on a process. What blocks (a workspace's loop image made, mounted,
// unmounted and deleted; a runtime's launch; the end of its teardown) is
// done on worker threads (Offload), its continuation back on the loop.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "contain/bounds.h"
#include "contain/probe.h"
#include "contain/signaller.h"
#include "contain/spec.h"
#include "session/alarm.h"
#include "session/error.h"
#include "session/runtime.h"
#include "session/shell.h"
#include "store/store.h"
#include "sys/backoff.h"
#include "sys/fd.h"
#include "sys/workers.h"

namespace cordon::session {

struct SessionOptions {
  std::string state_dir;
  size_t max_sessions = 64;
  std::chrono::milliseconds idle_ttl{20 * 60 * 1000};
  std::chrono::milliseconds max_lifetime{24 * 3600 * 1000};
  std::chrono::milliseconds verify_timeout{5000};
  // Housekeeping: idle culling and quarantine retries.
  std::chrono::milliseconds tick{1000};
  int64_t default_exec_timeout_ms = 600000;
  // Starts a `python` session's kernel; null: this daemon has no kernels
  // (the statically linked cordon without cordon-serve).
  RuntimeFactory python;
  // Python runtimes kept started and ready (the warm pool), handed to a new
  // python session whose request declares nothing of its own (no env,
  // limits, requirements; the default isolation, which must be a sandbox:
  // the kernel's HOME is then /workspace, whatever the directory is named
  // outside). Refilled in the background.
  size_t prespawn = 0;
  // Shell runtimes kept started and ready, on the same terms as `prespawn`
  // (a shell session whose request declares nothing of its own). On by
  // default in the daemon: a warm create answers without a launch.
  size_t prespawn_shells = 0;
  // The operator's default limits and ceilings (the daemon's); unset: a
  // session gets only the limits its request declares.
  std::optional<contain::Bounds> bounds;
  // Runs a job on the loop; called from worker threads (the daemon's:
  // boost::asio::post). Null: work meant for a worker is done on the loop.
  std::function<void(std::move_only_function<void()>)> post;
};

struct CreateRequest {
  std::optional<std::string> id;
  std::string kind = "shell";  // "shell" or "python"
  // env, limits, required, permissive: as for a run; the command is the shell.
  // limits.timeout_ms is the default deadline of each execution,
  // limits.grace_ms how long the shell has to come back after SIGINT.
  contain::Spec spec;
  std::optional<int64_t> ttl_s;  // idle TTL; default SessionOptions::idle_ttl
  bool fresh_workspace = false;  // do not reuse a lost session's workspace
  std::string isolation = "none";
  // A cold create: called with the session's view once its runtime is
  // launched and recorded, `starting`, before the create's answer (which
  // waits for it to be ready). Not called for a warm one, or when the
  // create fails before that.
  std::function<void(const nlohmann::json& session)> on_starting;
};

struct ExecCall {
  std::string command;
  std::optional<int64_t> timeout_ms;  // default: the session's
  std::optional<std::string> stdin_bytes;
  // Output as it arrives, while the execution runs (ExecRequest::on_output).
  std::function<void(std::string_view)> on_output;
};

struct Observer {
  std::function<void(std::chrono::microseconds)> ready;  // a shell answered, after this long
  std::function<void(const contain::Release&)> released;
  // A runtime died on its own (a kernel that crashed): its kind.
  std::function<void(const std::string& kind)> died;
  std::function<void(const std::string& event, const nlohmann::json& fields)> log;
};

// Every state a session can be in.
inline const std::vector<std::string> kSessionStates = {
    "starting", "ready", "busy", "closed", "invalidated", "quarantined", "lost"};

// The most sessions one page of a list may hold.
inline constexpr int64_t kMaxListLimit = 1000;

// Which sessions a list is of: a kind ("" for every kind), the states
// left out, and the page: those whose id comes after `after` ("": from
// the first), at most `limit` of them (none: all).
struct ListFilter {
  std::string kind;
  std::vector<std::string> except;
  std::string after;
  std::optional<size_t> limit;
  // False: sessions being closed (a DELETE or a cull under way) are left
  // out too, whatever their state says until they are closed.
  bool closing = true;
};
// The filter of `kind` ("shell" or "python"; none for every kind),
// `states` (the states to list; empty for every state), `after` (a
// session id, which need not exist) and `limit` (1 to kMaxListLimit). An
// error names the field ("kind", "state", "after", "limit") and what it
// may be.
Outcome<ListFilter> MakeListFilter(const std::optional<std::string>& kind,
                                   const std::vector<std::string>& states,
                                   const std::optional<std::string>& after = std::nullopt,
                                   std::optional<int64_t> limit = std::nullopt);

// A page of a list: the views, by id, and when there are more, the id to
// list after for the next page (the last one here).
struct Listing {
  nlohmann::json sessions;
  std::optional<std::string> next;
};

class Sessions final {
 public:
  struct Created {
    nlohmann::json session;
    bool created;  // false: the id was already live
  };

  static sys::Result<std::unique_ptr<Sessions>> Create(sys::Reactor& reactor, store::Store& store,
                                                       contain::Signaller& signaller,
                                                       const contain::Probe& probe,
                                                       SessionOptions options, Observer observer);
  ~Sessions();

  // Loads what an earlier daemon recorded. Call after contain::Reap: live
  // sessions become `lost` (their trees were reaped), a quarantined one whose
  // grant was released is closed.
  sys::Result<void> Recover();

  void CreateSession(CreateRequest request, std::function<void(Outcome<Created>)> done);
  // Views of the sessions `filter` lets through, by id: those held, and
  // those on record only (ended ones; see Find). They are made into what
  // `shape` returns on a worker (a week's ended sessions are many: a reply
  // is dumped there), and `done` gets it on the loop, or an error
  // (kInternal) when the store could not be read.
  template <typename T>
  void List(const ListFilter& filter, std::function<T(Listing page)> shape,
            std::function<void(Outcome<T>)> done) {
    auto made = std::make_shared<std::optional<T>>();
    OnList(
        filter,
        [made, shape = std::move(shape)](Listing page) { made->emplace(shape(std::move(page))); },
        [made, done = std::move(done)](std::optional<Error> failed) {
          if (failed) return done(std::unexpected(std::move(*failed)));
          done(std::move(**made));
        });
  }
  Outcome<nlohmann::json> Get(const std::string& id);
  void Delete(const std::string& id, bool keep_workspace,
              std::function<void(Outcome<nlohmann::json>)> done);
  void Exec(const std::string& id, ExecCall call, std::function<void(Outcome<ExecResult>)> done);
  // SIGINT to the running command; false when none runs.
  Outcome<bool> Interrupt(const std::string& id);
  // Replaces a live session's runtime with a fresh process in the same
  // generation and workspace (what it held is gone); `done` once the new
  // one is ready.
  void Restart(const std::string& id, std::function<void(Outcome<nlohmann::json>)> done);
  // The live runtime of a session (for the kernel gateway's relay), or null.
  Runtime* RuntimeOf(const std::string& id);
  // A websocket client of the session's kernel: connected, sent a message,
  // left (the gateway's relay). A session with a client connected is in
  // use, not idle (as jupyter-server culls no connected kernel by
  // default); its idle time counts from the last message or leaving.
  void ClientConnected(const std::string& id);
  void ClientUsed(const std::string& id);
  void ClientLeft(const std::string& id);
  // The kind of a session ("shell", "python"), or "" when there is none.
  std::string KindOf(const std::string& id);
  size_t live(const std::string& kind) const;
  size_t quarantined(const std::string& kind) const;
  // Runs `work` with the workspace of live session `id` (an O_PATH
  // descriptor of its directory; the session is marked used) on a worker
  // thread: a file's bytes are hashed, written and read there, never on
  // the loop. `done` follows on the loop with what `work` made, or why it
  // could not run. A close of the session meanwhile waits for it, so
  // nothing removes the workspace under it, and the id is not created
  // again until it is done.
  template <typename T>
  void WithWorkspace(const std::string& id, std::function<T(int workspace_fd)> work,
                     std::function<void(Outcome<T>)> done) {
    auto made = std::make_shared<std::optional<T>>();
    OnWorkspace(
        id, [made, work = std::move(work)](int fd) { made->emplace(work(fd)); },
        [made, done = std::move(done)](std::optional<Error> unusable) {
          if (unusable) return done(std::unexpected(std::move(*unusable)));
          done(std::move(**made));
        });
  }

  // Tears every live session down (workspaces kept; the sessions are
  // closed). `done(all_dead)` once every teardown has been decided.
  void Shutdown(std::function<void(bool)> done);

  size_t live() const;
  size_t quarantined() const;
  // Sessions held in memory: all but the ended ones that have settled,
  // which are kept on record only.
  size_t held() const { return sessions_.size(); }
  size_t warm(const std::string& kind = "python") const;  // ready in the pool

  // Retention (cordon serve --keep-records): forgets at most `limit` of
  // the closed and invalidated sessions whose record was last written
  // before `before_ms`, in the store and here (their ids then get 404).
  // Returns how many went.
  sys::Result<size_t> Forget(int64_t before_ms, int64_t limit);

 private:
  struct Pending {
    ExecCall call;
    std::chrono::steady_clock::time_point deadline;
    std::function<void(Outcome<ExecResult>)> done;
  };
  struct Session {
    std::string id;
    std::string kind = "shell";
    int64_t generation = 0;
    std::string state;  // as recorded; "busy" is derived from the shell
    contain::Spec spec;
    int64_t ttl_ms = 0;
    nlohmann::json summary;  // what was asked, without env values
    std::unique_ptr<Runtime> runtime;
    std::string grant_id;
    std::deque<Pending> queue;
    std::vector<std::function<void(Outcome<Created>)>> create_waiters;
    std::vector<std::function<void(Outcome<nlohmann::json>)>> delete_waiters;
    std::vector<std::function<void(Outcome<nlohmann::json>)>> restart_waiters;
    bool restarting = false;
    bool relaunching = false;  // its next runtime is being launched (Relaunch)
    bool closing = false;
    bool removing = false;       // its workspace is being removed (Close)
    int file_operations = 0;     // WithWorkspace's, under way on workers
    bool close_pending = false;  // Close waits for them
    bool keep_workspace = false;
    bool retrying = false;
    bool retry_again = false;  // a stop's last try, asked for while one was under way
    bool recorded = false;     // its last record was written
    nlohmann::json problem;
    int64_t created_at_ms = 0;
    std::chrono::steady_clock::time_point born;  // of this generation
    std::chrono::steady_clock::time_point last_used;
    std::chrono::steady_clock::time_point starting_since;
    int clients = 0;  // websocket clients connected (ClientConnected)
  };
  // What a restart needs to start an invalidated session again in its
  // workspace (Restart): its spec, which no record keeps (env values), for
  // its idle TTL after its end. At most max_sessions, the oldest dropped.
  struct Revivable {
    int64_t generation = 0;
    contain::Spec spec;
    std::chrono::steady_clock::time_point until;
  };
  void KeepRevivable(const Session& s);

  // Where a runtime's events go: a pool entry until it is handed out, then
  // a session's generation.
  struct Binding {
    std::string id;  // the pool key, then the session id
    int64_t generation = 0;
    bool pooled = true;
  };
  // What a pool runtime tells the pool, then (once handed out) its session.
  Runtime::Events PoolEventsOf(const std::shared_ptr<Binding>& binding);
  struct Warm {
    std::string kind;  // "shell" or "python"
    std::unique_ptr<Runtime> runtime;
    std::shared_ptr<Binding> binding;
    contain::Spec spec;
    std::string workspace;
    bool ready = false;
    std::chrono::steady_clock::time_point started;
  };

  Sessions(sys::Reactor& reactor, store::Store& store, contain::Signaller& signaller,
           const contain::Probe& probe, SessionOptions options, Observer observer)
      : reactor_(reactor),
        store_(store),
        signaller_(signaller),
        probe_(probe),
        options_(std::move(options)),
        observer_(std::move(observer)) {}

  // Session `id`, held, or read back from its record (an ended one, let go
  // once settled: Tick), and then held again until it settles; null when
  // there is none, an error (kInternal) when its record cannot be read.
  Outcome<Session*> Find(const std::string& id);
  // Find, with "no session ID" (kNotFound) for none.
  Outcome<Session*> Existing(const std::string& id);
  // Session `id`'s generation `generation`, if it is held.
  Session* Current(const std::string& id, int64_t generation);
  // What a record says of a session (none of its runtime; any thread).
  static std::unique_ptr<Session> FromRecord(const store::SessionRecord& r);
  // Ended, recorded so, and nothing under way: nothing is lost by letting
  // it go (Tick).
  bool Settled(const Session& s) const;
  static std::optional<uint64_t> OomKills(const Session& s);
  nlohmann::json View(const Session& s) const;
  // List's work, which leaves what `shape` makes to its caller.
  void OnList(const ListFilter& filter, std::function<void(Listing page)> shape,
              std::function<void(std::optional<Error>)> done);
  // WithWorkspace's work, which leaves what it makes to its caller.
  void OnWorkspace(const std::string& id, std::function<void(int workspace_fd)> work,
                   std::function<void(std::optional<Error> unusable)> done);
  // Writes s's record; a failure is logged and returned.
  sys::Result<void> Record(Session& s);
  // A new generation whose first record could not be written (`why`): the
  // create fails, and its runtime and workspace go as in a close.
  Error Unrecorded(Session& s, const sys::Error& why, bool keep_workspace);
  void Log(const std::string& event, const Session& s, nlohmann::json fields = {});
  using MadeRuntime = std::expected<std::unique_ptr<Runtime>, contain::AdmitError>;
  // What a runtime of session `id`'s generation `generation` tells it.
  Runtime::Events EventsOf(const std::string& id, int64_t generation);
  // Launches a runtime of `kind` (a shell, or options_.python's kernel);
  // touches no reactor, so it may run on a worker. Attached follows.
  MadeRuntime Launch(const std::string& kind, const std::string& id, const contain::Spec& spec,
                     Runtime::Events events);
  // A cold create's half on a worker: its workspace made (and bounded),
  // then its runtime launched.
  struct Prepared {
    Outcome<void> made;
    std::optional<std::string> unbounded;  // why bounding the workspace failed
    std::optional<MadeRuntime> runtime;    // launched once its workspace is made
    std::chrono::steady_clock::time_point
        launched;  // when its launch began (ready_us counts from it)
  };
  Prepared Prepare(const std::string& id, const std::string& workspace, bool reuse,
                   const contain::Spec& spec, Runtime::Events events, const std::string& kind);
  // A restart: a fresh runtime of s's generation, in its workspace,
  // launched on a worker and attached on the loop; `what` ("the shell")
  // names it where it cannot be.
  void Relaunch(Session& s, const std::string& what);
  // Makes `runtime` s's, starting (not yet recorded), or says why there is
  // none.
  std::optional<Error> Started(Session& s, MadeRuntime runtime);
  void OnReady(const std::string& id, int64_t generation);
  void OnEnded(const std::string& id, int64_t generation, Runtime::Ended ended);
  void Pump(Session& s);
  // Closes `s` once its workspace is removed (unless kept); Closed then
  // records it and answers.
  void Close(Session& s);
  void Closed(Session& s, sys::Result<void> removed);
  // `why`: why the daemon tore the runtime down, if it did (Runtime::Ended::why).
  void Quarantine(Session& s, const contain::Release& release, const std::string& why);
  void Retry(Session& s);
  void FailQueue(Session& s, const Error& error);
  std::optional<Error> Unusable(Session& s);
  void Tick();
  void FillPool();
  // Starts one pool runtime of `kind` (its workspace made and the runtime
  // launched on a worker).
  void StartWarm(const std::string& kind);
  size_t PoolTarget(const std::string& kind) const;
  bool MatchesPool(const std::string& kind, const contain::Spec& spec) const;
  // Hands a ready pool runtime of `kind` to session `id`; false when none
  // is ready or the workspace cannot be moved.
  bool TakeWarm(const std::string& kind, const std::string& id, std::unique_ptr<Session>& session,
                int64_t ttl_ms);
  void MaybeFinishShutdown();
  // Removes a workspace (and its disk bound) on a worker.
  void RemoveElsewhere(std::string workspace);
  // A runtime's: the end of its teardown (its cgroups' accounting read and
  // removed, the release recorded) on a worker.
  session::ReleaseElsewhere ReleaseElsewhere() { return run::ReleaseOn(offload_); }

  // `work` on a worker (it may block), then `then(its result)` on the
  // loop; a shutdown waits for every one.
  template <typename Work, typename Then>
  void Offload(Work work, Then then) {
    offload_(std::move(work), [this, then = std::move(then)](auto&&... result) mutable {
      then(std::forward<decltype(result)>(result)...);
      MaybeFinishShutdown();
    });
  }

  sys::Reactor& reactor_;
  store::Store& store_;
  contain::Signaller& signaller_;
  const contain::Probe& probe_;
  SessionOptions options_;
  Observer observer_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  // Runtimes that ended and were replaced; destroyed at the next tick or
  // with the Sessions, never from inside their own callbacks.
  std::vector<std::unique_ptr<Runtime>> retired_;
  std::map<std::string, Revivable> revivable_;  // by session id
  // Cold creates whose workspace is being made, by id: the creates of that
  // id that came meanwhile, answered with it.
  std::map<std::string, std::vector<std::function<void(Outcome<Created>)>>> preparing_;
  std::map<std::string, Warm> pool_;
  std::map<std::string, size_t> pool_preparing_;  // per kind: workspaces being made
  // Per kind: after a pool runtime failed to start, or ended before it was
  // ready, the next is tried only after `delay` (doubling to a minute), so
  // that a host where runtimes cannot start is not asked every tick.
  std::map<std::string, sys::Backoff> pool_backoff_;
  // Tick's writing again of the records the store refused.
  sys::Backoff rerecord_;
  void PoolFailed(const std::string& kind);
  std::unique_ptr<Alarm> tick_;
  std::function<void(bool)> shutdown_;  // set while stopping, until called
  bool stopping_ = false;
  bool shutdown_all_dead_ = true;
  // Last: destroyed first, its jobs finished while the rest is still here.
  sys::Offload offload_{2, options_.post};
};

}  // namespace cordon::session
