#include "store/store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>

#include "sys/json_text.h"

namespace cordon::store {
namespace {

using nlohmann::json;

// Each entry moves the schema one version up; never edit a released one.
constexpr std::array<std::string_view, 5> kMigrations = {
    R"sql(
CREATE TABLE grants (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('active', 'released')),
  spec TEXT NOT NULL,
  enforced TEXT NOT NULL,
  degraded TEXT NOT NULL,
  mechanisms TEXT NOT NULL,
  cgroups TEXT NOT NULL,
  supervisor_pid INTEGER NOT NULL,
  supervisor_ppid INTEGER NOT NULL,
  supervisor_start_ticks INTEGER NOT NULL,
  supervisor_boot_id TEXT NOT NULL,
  pid INTEGER,
  ppid INTEGER,
  start_ticks INTEGER,
  boot_id TEXT,
  pgid INTEGER,
  outcome TEXT,
  release TEXT,
  created_at_ms INTEGER NOT NULL,
  started_at_ms INTEGER,
  released_at_ms INTEGER
);
CREATE INDEX grants_by_state ON grants (state, created_at_ms);
)sql",
    // 2: the daemon's sessions (issue 5).
    R"sql(
CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  generation INTEGER NOT NULL,
  kind TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('starting', 'ready', 'busy', 'closed', 'invalidated',
                                       'quarantined', 'lost')),
  workspace TEXT NOT NULL,
  grant_id TEXT,
  spec TEXT NOT NULL,
  problem TEXT,
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
)sql",
    // 3: Jupyter sessions, paths bound to kernels (/api/sessions, issue 14).
    // kernel_id names a sessions row but is not a foreign key: a kernel's
    // row outlives it (closed), and a session whose kernel is gone is
    // dropped by the gateway when it next looks, as jupyter-server does.
    R"sql(
CREATE TABLE jupyter_sessions (
  id TEXT PRIMARY KEY,
  path TEXT NOT NULL,
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  kernel_id TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE INDEX jupyter_sessions_by_path ON jupyter_sessions (path);
)sql",
    // 4: ended sessions found by age, to be forgotten (Store::PruneSessions).
    R"sql(
CREATE INDEX sessions_by_state ON sessions (state, updated_at_ms);
)sql",
    // 5: each session's kind in its column (written "shell" for every
    // session before; the kind was in its spec alone), for ListSessions.
    R"sql(
UPDATE sessions SET kind = json_extract(spec, '$.kind')
  WHERE json_extract(spec, '$.kind') IN ('shell', 'python');
)sql",
};

constexpr std::string_view kColumns =
    "id, owner, state, spec, enforced, degraded, mechanisms, cgroups, supervisor_pid, "
    "supervisor_start_ticks, supervisor_boot_id, pid, ppid, start_ticks, boot_id, pgid, outcome, "
    "release, created_at_ms, started_at_ms, released_at_ms, supervisor_ppid";

json ParseOr(const std::string& text, json fallback) {
  if (text.empty()) return fallback;
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? fallback : parsed;
}

std::optional<int64_t> OptInt(const Statement& s, int column) {
  if (s.IsNull(column)) return std::nullopt;
  return s.Int(column);
}

GrantRecord ReadRow(const Statement& s) {
  GrantRecord g;
  g.id = s.Text(0);
  g.owner = s.Text(1);
  g.state = s.Text(2);
  g.spec = ParseOr(s.Text(3), json::object());
  g.enforced = ParseOr(s.Text(4), json::array());
  g.degraded = ParseOr(s.Text(5), json::array());
  g.mechanisms = ParseOr(s.Text(6), json::object());
  g.cgroups = ParseOr(s.Text(7), json::object());
  g.supervisor = proc::Identity{static_cast<pid_t>(s.Int(8)), static_cast<pid_t>(s.Int(21)),
                                static_cast<uint64_t>(s.Int(9)), s.Text(10)};
  if (!s.IsNull(11)) {
    g.identity = proc::Identity{static_cast<pid_t>(s.Int(11)), static_cast<pid_t>(s.Int(12)),
                                static_cast<uint64_t>(s.Int(13)), s.Text(14)};
  }
  if (auto pgid = OptInt(s, 15)) g.pgid = static_cast<pid_t>(*pgid);
  g.outcome = s.Text(16);
  g.release = ParseOr(s.Text(17), json());
  g.created_at_ms = s.Int(18);
  g.started_at_ms = OptInt(s, 19);
  g.released_at_ms = OptInt(s, 20);
  return g;
}

constexpr const char* kSessionColumns =
    "SELECT id, generation, kind, state, workspace, grant_id, spec, problem, created_at_ms, "
    "updated_at_ms FROM sessions ";

// A sessions row but its two JSON columns, left as text in `spec` and
// `problem` for ParseSessionJson (which need not hold the lock).
SessionRecord ReadSessionRow(const Statement& s, std::string& spec, std::string& problem) {
  SessionRecord r;
  r.id = s.Text(0);
  r.generation = s.Int(1);
  r.kind = s.Text(2);
  r.state = s.Text(3);
  r.workspace = s.Text(4);
  r.grant_id = s.Text(5);
  spec = s.Text(6);
  problem = s.Text(7);
  r.created_at_ms = s.Int(8);
  r.updated_at_ms = s.Int(9);
  return r;
}

void ParseSessionJson(SessionRecord& r, const std::string& spec, const std::string& problem) {
  r.spec = ParseOr(spec, json::object());
  r.problem = ParseOr(problem, json());
}

}  // namespace

json ToJson(const proc::Identity& id) {
  return {
      {"pid", id.pid}, {"ppid", id.ppid}, {"start_ticks", id.start_ticks}, {"boot_id", id.boot_id}};
}

json ToJson(const GrantRecord& g) {
  auto opt = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(); };
  return {{"id", g.id},
          {"owner", g.owner},
          {"state", g.state},
          {"spec", g.spec},
          {"identity", g.identity ? proc::ToJson(*g.identity) : json()},
          {"pgid", g.pgid ? json(*g.pgid) : json()},
          {"cgroups", g.cgroups},
          {"enforced", g.enforced},
          {"degraded", g.degraded},
          {"mechanisms", g.mechanisms},
          {"supervisor", proc::ToJson(g.supervisor)},
          {"outcome", g.outcome.empty() ? json() : json(g.outcome)},
          {"release", g.release},
          {"created_at_ms", g.created_at_ms},
          {"started_at_ms", opt(g.started_at_ms)},
          {"released_at_ms", opt(g.released_at_ms)}};
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

sys::Result<std::string> ResolveStateDir(const std::optional<std::string>& flag) {
  if (flag) {
    if (flag->empty()) return sys::Fail("--state-dir: the path is empty", EINVAL);
    return *flag;
  }
  if (const char* env = std::getenv("CORDON_STATE_DIR"); env && *env) return std::string(env);
  if (::geteuid() == 0) return std::string("/var/lib/cordon");
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg == '/') {
    return std::string(xdg) + "/cordon";
  }
  if (const char* home = std::getenv("HOME"); home && *home == '/') {
    return std::string(home) + "/.local/state/cordon";
  }
  return sys::Fail(
      "no state directory: HOME and XDG_STATE_HOME are unset; pass --state-dir or set "
      "CORDON_STATE_DIR",
      ENOENT);
}

sys::Result<Store> Store::Open(const std::string& state_dir) {
  // mkdir -p with 0700 for the last component; parents as the umask allows.
  for (size_t pos = 1; pos <= state_dir.size(); ++pos) {
    if (pos != state_dir.size() && state_dir[pos] != '/') continue;
    std::string part = state_dir.substr(0, pos);
    if (::mkdir(part.c_str(), pos == state_dir.size() ? 0700 : 0755) != 0 && errno != EEXIST) {
      return std::unexpected(
          sys::Error::FromErrno("mkdir(\"" + part + "\")").Context("state directory"));
    }
  }
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return sys::Fail("state directory " + state_dir + " is not a directory", ENOTDIR);
  }
  std::string path = state_dir + "/cordon.db";
  CORDON_ASSIGN_OR_RETURN(Database db, Database::Open(path));
  // The records are the owner's alone, whatever the directory lets others
  // pass (SQLite makes its -wal and -shm files with the database's mode).
  for (const char* suffix : {"", "-wal", "-shm"}) (void)::chmod((path + suffix).c_str(), 0600);
  Store store(std::move(db), path);
  CORDON_RETURN_IF_ERROR(store.Migrate());
  return store;
}

sys::Result<void> Store::CheckpointInBackground() {
  std::lock_guard lock(*mutex_);
  if (checkpointer_) return {};
  CORDON_ASSIGN_OR_RETURN(checkpointer_, Checkpointer::Start(db_, path_, kCheckpointPages));
  return {};
}

sys::Result<void> Store::Migrate() {
  auto version = [this]() -> sys::Result<int> {
    CORDON_ASSIGN_OR_RETURN(Statement s, db_.Prepare("PRAGMA user_version"));
    CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
    return row ? static_cast<int>(s.Int(0)) : 0;
  };
  const int latest = static_cast<int>(kMigrations.size());
  // The common case needs no write lock: the schema is current.
  CORDON_ASSIGN_OR_RETURN(int current, version());
  if (current != latest) {
    CORDON_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
    CORDON_ASSIGN_OR_RETURN(current, version());  // another process may have migrated
    if (current > latest) {
      return sys::Fail(path_ + " has schema version " + std::to_string(current) +
                           ", newer than this cordon knows (" + std::to_string(latest) +
                           "); upgrade cordon",
                       EPROTO);
    }
    for (int v = current; v < latest; ++v) {
      CORDON_RETURN_IF_ERROR(db_.Exec(kMigrations[static_cast<size_t>(v)]));
    }
    CORDON_RETURN_IF_ERROR(db_.Exec("PRAGMA user_version = " + std::to_string(latest)));
    CORDON_RETURN_IF_ERROR(tx.Commit());
  }
  schema_version_ = latest;
  return {};
}

sys::Result<void> Store::InsertGrant(const GrantRecord& g) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(
      Statement s,
      db_.Prepare("INSERT INTO grants (id, owner, state, spec, enforced, degraded, mechanisms, "
                  "cgroups, supervisor_pid, supervisor_start_ticks, supervisor_boot_id, "
                  "created_at_ms, supervisor_ppid) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"));
  s.Bind(1, g.id)
      .Bind(2, g.owner)
      .Bind(3, g.state)
      .Bind(4, sys::JsonText(g.spec))
      .Bind(5, sys::JsonText(g.enforced))
      .Bind(6, sys::JsonText(g.degraded))
      .Bind(7, sys::JsonText(g.mechanisms))
      .Bind(8, sys::JsonText(g.cgroups))
      .Bind(9, int64_t{g.supervisor.pid})
      .Bind(10, static_cast<int64_t>(g.supervisor.start_ticks))
      .Bind(11, g.supervisor.boot_id)
      .Bind(12, g.created_at_ms)
      .Bind(13, int64_t{g.supervisor.ppid});
  return s.Run();
}

sys::Result<void> Store::RecordStart(const std::string& id, const proc::Identity& identity,
                                     pid_t pgid) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(Statement s,
                          db_.Prepare("UPDATE grants SET pid = ?2, ppid = ?3, start_ticks = ?4, "
                                      "boot_id = ?5, pgid = ?6, started_at_ms = ?7 WHERE id = ?1"));
  s.Bind(1, id)
      .Bind(2, int64_t{identity.pid})
      .Bind(3, int64_t{identity.ppid})
      .Bind(4, static_cast<int64_t>(identity.start_ticks))
      .Bind(5, identity.boot_id)
      .Bind(6, int64_t{pgid})
      .Bind(7, NowMs());
  return s.Run();
}

sys::Result<void> Store::DeleteGrant(const std::string& id) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(Statement s, db_.Prepare("DELETE FROM grants WHERE id = ?1"));
  s.Bind(1, id);
  return s.Run();
}

sys::Result<void> Store::SetGrantOwner(const std::string& id, const std::string& owner) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(Statement s, db_.Prepare("UPDATE grants SET owner = ?2 WHERE id = ?1"));
  s.Bind(1, id).Bind(2, owner);
  return s.Run();
}

sys::Result<void> Store::HandOutGrant(const std::string& id, const std::string& owner,
                                      const json& spec) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(Statement s,
                          db_.Prepare("UPDATE grants SET owner = ?2, spec = ?3 WHERE id = ?1"));
  s.Bind(1, id).Bind(2, owner).Bind(3, sys::JsonText(spec));
  return s.Run();
}

sys::Result<void> Store::RecordRelease(const std::string& id, const std::string& outcome,
                                       const json& release, bool released) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(Statement s,
                          db_.Prepare("UPDATE grants SET outcome = ?2, release = ?3, state = ?4, "
                                      "released_at_ms = ?5 WHERE id = ?1"));
  s.Bind(1, id).Bind(2, outcome).Bind(3, sys::JsonText(release));
  s.Bind(4, released ? "released" : "active");
  s.Bind(5, released ? std::optional<int64_t>(NowMs()) : std::nullopt);
  return s.Run();
}

sys::Result<std::vector<GrantRecord>> Store::ListGrants(bool all) {
  std::lock_guard lock(*mutex_);
  std::string sql = "SELECT " + std::string(kColumns) + " FROM grants" +
                    (all ? "" : " WHERE state = 'active'") + " ORDER BY created_at_ms DESC, id";
  CORDON_ASSIGN_OR_RETURN(Statement s, db_.Prepare(sql));
  std::vector<GrantRecord> out;
  while (true) {
    CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRow(s));
  }
  return out;
}

sys::Result<std::optional<GrantRecord>> Store::GetGrant(const std::string& id) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(
      Statement s, db_.Prepare("SELECT " + std::string(kColumns) + " FROM grants WHERE id = ?1"));
  s.Bind(1, id);
  CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return ReadRow(s);
}

sys::Result<int64_t> Store::PruneGrants(int64_t before_ms, int64_t limit) {
  std::lock_guard lock(*mutex_);
  // A grant is created before it is released, so the index on
  // (state, created_at_ms) bounds the scan.
  CORDON_ASSIGN_OR_RETURN(Statement s,
                          db_.Prepare("DELETE FROM grants WHERE rowid IN (SELECT rowid FROM grants "
                                      "WHERE state = 'released' AND created_at_ms < ?1 AND "
                                      "released_at_ms < ?1 LIMIT ?2)"));
  s.Bind(1, before_ms).Bind(2, limit);
  CORDON_RETURN_IF_ERROR(s.Run());
  return static_cast<int64_t>(sqlite3_changes(db_.handle()));
}

sys::Result<std::vector<std::string>> Store::PruneSessions(int64_t before_ms, int64_t limit) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(
      Statement s, db_.Prepare("DELETE FROM sessions WHERE rowid IN (SELECT rowid FROM sessions "
                               "WHERE state IN ('closed', 'invalidated') AND updated_at_ms < ?1 "
                               "LIMIT ?2) RETURNING id"));
  s.Bind(1, before_ms).Bind(2, limit);
  std::vector<std::string> ids;
  while (true) {
    CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ids.push_back(s.Text(0));
  }
  return ids;
}

sys::Result<void> Store::PutSession(const SessionRecord& r) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(
      Statement s,
      db_.Prepare("INSERT OR REPLACE INTO sessions (id, generation, kind, state, workspace, "
                  "grant_id, spec, problem, created_at_ms, updated_at_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  s.Bind(1, r.id)
      .Bind(2, r.generation)
      .Bind(3, r.kind)
      .Bind(4, r.state)
      .Bind(5, r.workspace)
      .Bind(6, r.grant_id)
      .Bind(7, sys::JsonText(r.spec))
      .Bind(8, sys::JsonText(r.problem))
      .Bind(9, r.created_at_ms)
      .Bind(10, r.updated_at_ms);
  return s.Run();
}

sys::Result<std::vector<SessionRecord>> Store::ListSessions(
    const std::string& kind, const std::vector<std::string>& except_states,
    const std::string& after, std::optional<size_t> max_rows) {
  // The states wanted, named (not those left out): the states' index
  // then finds the few live or invalidated rows among many closed ones.
  json states = json::array();
  for (const char* state :
       {"starting", "ready", "busy", "closed", "invalidated", "quarantined", "lost"}) {
    if (std::find(except_states.begin(), except_states.end(), state) == except_states.end()) {
      states.push_back(state);
    }
  }
  const std::string wanted = sys::JsonText(states);
  // A page at a time, the lock held only while a page is read and its
  // JSON parsed after: a week of ended sessions keeps the other callers
  // (the daemon's loop) waiting for a page, not for all of them.
  constexpr size_t kPage = 256;
  std::vector<SessionRecord> out;
  while (true) {
    std::vector<std::pair<std::string, std::string>> json_text;
    const size_t first = out.size();
    const size_t page = max_rows ? std::min(kPage, *max_rows - first) : kPage;
    if (page == 0) return out;
    {
      std::lock_guard lock(*mutex_);
      CORDON_ASSIGN_OR_RETURN(
          Statement s,
          db_.Prepare(std::string(kSessionColumns) +
                      "WHERE id > ?3 AND (?1 = '' OR kind = ?1) AND state IN (SELECT value FROM "
                      "json_each(?2)) ORDER BY id LIMIT ?4"));
      s.Bind(1, kind)
          .Bind(2, wanted)
          .Bind(3, first ? out.back().id : after)
          .Bind(4, static_cast<int64_t>(page));
      while (true) {
        CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
        if (!row) break;
        auto& [spec, problem] = json_text.emplace_back();
        out.push_back(ReadSessionRow(s, spec, problem));
      }
    }
    for (size_t i = 0; i < json_text.size(); ++i) {
      ParseSessionJson(out[first + i], json_text[i].first, json_text[i].second);
    }
    if (json_text.size() < page) return out;
  }
}

sys::Result<std::optional<SessionRecord>> Store::GetSession(const std::string& id) {
  std::string spec, problem;
  std::optional<SessionRecord> r;
  {
    std::lock_guard lock(*mutex_);
    CORDON_ASSIGN_OR_RETURN(Statement s,
                            db_.Prepare(std::string(kSessionColumns) + "WHERE id = ?1"));
    s.Bind(1, id);
    CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return r;
    r = ReadSessionRow(s, spec, problem);
  }
  ParseSessionJson(*r, spec, problem);
  return r;
}

sys::Result<void> Store::PutJupyterSession(const JupyterSessionRecord& r) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(
      Statement s,
      // An upsert, not INSERT OR REPLACE: the row keeps its rowid (the
      // listing's order) when it changes.
      db_.Prepare("INSERT INTO jupyter_sessions (id, path, name, type, kernel_id, "
                  "created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                  "ON CONFLICT (id) DO UPDATE SET path = ?2, name = ?3, type = ?4, "
                  "kernel_id = ?5, updated_at_ms = ?7"));
  s.Bind(1, r.id)
      .Bind(2, r.path)
      .Bind(3, r.name)
      .Bind(4, r.type)
      .Bind(5, r.kernel_id)
      .Bind(6, r.created_at_ms)
      .Bind(7, r.updated_at_ms);
  return s.Run();
}

sys::Result<std::vector<JupyterSessionRecord>> Store::ListJupyterSessions() {
  std::lock_guard lock(*mutex_);
  // Creation order (rowid breaks ties within a millisecond), as jupyter-server
  // lists its sessions.
  CORDON_ASSIGN_OR_RETURN(
      Statement s,
      db_.Prepare("SELECT id, path, name, type, kernel_id, created_at_ms, "
                  "updated_at_ms FROM jupyter_sessions ORDER BY created_at_ms, rowid"));
  std::vector<JupyterSessionRecord> out;
  while (true) {
    CORDON_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    JupyterSessionRecord r;
    r.id = s.Text(0);
    r.path = s.Text(1);
    r.name = s.Text(2);
    r.type = s.Text(3);
    r.kernel_id = s.Text(4);
    r.created_at_ms = s.Int(5);
    r.updated_at_ms = s.Int(6);
    out.push_back(std::move(r));
  }
  return out;
}

sys::Result<void> Store::DeleteJupyterSession(const std::string& id) {
  std::lock_guard lock(*mutex_);
  CORDON_ASSIGN_OR_RETURN(Statement s, db_.Prepare("DELETE FROM jupyter_sessions WHERE id = ?1"));
  s.Bind(1, id);
  return s.Run();
}

}  // namespace cordon::store
