// cordon's records in an embedded SQLite database (WAL) in the state
// directory. Grants are written `active` before anything is spawned and move
// to `released` only after death was verified, so a crashed supervisor
// leaves behind exactly what `reap` needs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "proc/identity.h"
#include "store/sqlite.h"

namespace cordon::store {

struct GrantRecord {
  std::string id;
  std::string owner;
  std::string state = "active";                          // "active" | "released"
  nlohmann::json spec;                                   // a summary: no env values, no stdin bytes
  nlohmann::json enforced = nlohmann::json::array();     // capability names
  nlohmann::json degraded = nlohmann::json::array();     // [{capability, reason}]
  nlohmann::json mechanisms = nlohmann::json::object();  // {capability: mechanism}
  nlohmann::json cgroups = nlohmann::json::object();     // {"v2"|"memory"|"pids": path}
  proc::Identity supervisor;                             // the process responsible for the grant
  std::optional<proc::Identity> identity;                // the main process, once started
  std::optional<pid_t> pgid;
  std::string outcome;     // set once, at release
  nlohmann::json release;  // {dead, escalated, survivors, method} or null
  int64_t created_at_ms = 0;
  std::optional<int64_t> started_at_ms;
  std::optional<int64_t> released_at_ms;
};

// A daemon session (DESIGN.md §2): one row per id, the latest generation.
struct SessionRecord {
  std::string id;
  int64_t generation = 1;
  std::string kind = "shell";
  // starting | ready | busy | closed | invalidated | quarantined | lost
  std::string state = "starting";
  std::string workspace;
  std::string grant_id;                            // the current runtime's grant, if any
  nlohmann::json spec = nlohmann::json::object();  // what was asked: no env values
  nlohmann::json problem;                          // null, or {"message", "survivors"}
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
};

// A Jupyter session (/api/sessions, src/gateway/sessions_api.h): a path bound
// to a kernel, which is a python SessionRecord's id. Nothing here checks that
// the kernel exists; the gateway drops a row whose kernel is gone.
struct JupyterSessionRecord {
  std::string id;         // a UUID
  std::string path;       // the client's path (a notebook's, or any unique name)
  std::string name;       // "" when the client gave none
  std::string type;       // "notebook", "console", "file", ...
  std::string kernel_id;  // a python session's id
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
};

// Its methods may be called from any thread, one at a time (the daemon's
// loop, and the workers that launch its runs).
class Store final {
 public:
  // Opens or creates `<state_dir>/cordon.db` and applies pending migrations.
  // The state directory is created with mode 0700.
  static sys::Result<Store> Open(const std::string& state_dir);

  sys::Result<void> InsertGrant(const GrantRecord& grant);
  // Forgets a grant that was recorded but never made (its admission failed
  // after the record): no process, no group of it exists.
  sys::Result<void> DeleteGrant(const std::string& id);
  sys::Result<void> RecordStart(const std::string& id, const proc::Identity& identity, pid_t pgid);
  // A warm pool's grant handed to the session that took its runtime: the
  // owner it is recorded under from then on.
  sys::Result<void> SetGrantOwner(const std::string& id, const std::string& owner);
  // A warm run's grant handed to a run: its owner and the summary of the
  // spec it now runs (SpecSummary), both in one write, before the command.
  sys::Result<void> HandOutGrant(const std::string& id, const std::string& owner,
                                 const nlohmann::json& spec);
  // `released`: death was verified and the grant moves to `released`;
  // otherwise it stays `active` with the release (naming survivors) recorded.
  sys::Result<void> RecordRelease(const std::string& id, const std::string& outcome,
                                  const nlohmann::json& release, bool released);

  // Active grants, or every grant when `all` (newest first).
  sys::Result<std::vector<GrantRecord>> ListGrants(bool all);
  sys::Result<std::optional<GrantRecord>> GetGrant(const std::string& id);

  // Retention (cordon serve --keep-records): forgets at most `limit` of
  // what ended before `before_ms`. Only released grants go: an active one
  // is what `reap` needs. Only closed and invalidated sessions go: a lost
  // one keeps its workspace for a create with the same id, and a
  // quarantined one still holds processes. Returns how many grants went,
  // and the ids of the sessions that went.
  sys::Result<int64_t> PruneGrants(int64_t before_ms, int64_t limit);
  sys::Result<std::vector<std::string>> PruneSessions(int64_t before_ms, int64_t limit);

  // Inserts or replaces the session's row (its latest generation).
  sys::Result<void> PutSession(const SessionRecord& session);
  // The rows of `kind` (every kind where empty) whose state is not among
  // `except_states`, by id: those after `after` ("": from the first), at
  // most `max_rows` of them (none: all). Read a page at a time, the lock
  // let go between pages: a long list does not hold the other callers for
  // all of it.
  sys::Result<std::vector<SessionRecord>> ListSessions(
      const std::string& kind = "", const std::vector<std::string>& except_states = {},
      const std::string& after = "", std::optional<size_t> max_rows = std::nullopt);
  sys::Result<std::optional<SessionRecord>> GetSession(const std::string& id);

  // Jupyter sessions: inserted or replaced by id; listed oldest first;
  // deleting an id that has no row is not an error.
  sys::Result<void> PutJupyterSession(const JupyterSessionRecord& session);
  sys::Result<std::vector<JupyterSessionRecord>> ListJupyterSessions();
  sys::Result<void> DeleteJupyterSession(const std::string& id);

  // For a long-lived owner (the daemon): from now on the WAL is
  // checkpointed by a thread with a connection of its own (Checkpointer),
  // so that no write waits for a checkpoint's fsyncs.
  sys::Result<void> CheckpointInBackground();
  uint64_t background_checkpoints() const { return checkpointer_ ? checkpointer_->done() : 0; }

  int schema_version() const { return schema_version_; }
  // Since the store's latest write failed (a full disk, say), until one
  // succeeds: the first error of those failures and when it came.
  std::optional<WriteHealth::Failing> failing_writes() const {
    return db_.write_health().failing();
  }
  const std::string& path() const { return path_; }

 private:
  Store(Database db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}
  sys::Result<void> Migrate();

  Database db_;
  std::string path_;
  int schema_version_ = 0;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  // movable Store
  std::unique_ptr<Checkpointer> checkpointer_;  // after db_: stopped before it closes
};

// The record as `cordon grants --json` shows it; the identity is
// {"pid", "ppid", "start_ticks", "boot_id"}.
nlohmann::json ToJson(const GrantRecord& grant);

// The state directory: `flag` if given, else $CORDON_STATE_DIR, else
// /var/lib/cordon for root and $XDG_STATE_HOME/cordon (~/.local/state/cordon)
// otherwise.
sys::Result<std::string> ResolveStateDir(const std::optional<std::string>& flag);

int64_t NowMs();

}  // namespace cordon::store
