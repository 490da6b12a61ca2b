#include "store/sqlite.h"

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "sys/workers.h"

namespace cordon::store {
namespace {

// The errno an SQLite failure stands for: ENOSPC or EDQUOT when the store's
// filesystem is full (SQLITE_FULL, or a write that failed with one), so
// that the layers above can say so; EIO otherwise.
int ErrnoOf(sqlite3* db, int rc) {
  int os = sqlite3_system_errno(db);
  if (os == ENOSPC || os == EDQUOT) return os;
  if ((rc & 0xff) == SQLITE_FULL || (sqlite3_errcode(db) & 0xff) == SQLITE_FULL) return ENOSPC;
  return EIO;
}

sys::Error SqlError(sqlite3* db, std::string_view what, int rc) {
  // A statement is named by its head ("INSERT INTO grants"), not its text.
  what = what.substr(0, std::min(what.find('('), size_t{48}));
  while (!what.empty() && what.back() == ' ') what.remove_suffix(1);
  return sys::Error("sqlite " + std::string(what) + ": " + sqlite3_errmsg(db), ErrnoOf(db, rc));
}

}  // namespace

void WriteHealth::Succeeded() {
  if (!failing_now_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(mutex_);
  failing_.reset();
  failing_now_ = false;
}

void WriteHealth::Failed(const sys::Error& error) {
  std::lock_guard lock(mutex_);
  if (failing_) return;  // the first of the run is kept
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  failing_ =
      Failing{error.message(), std::chrono::duration_cast<std::chrono::milliseconds>(now).count()};
  failing_now_ = true;
}

std::optional<WriteHealth::Failing> WriteHealth::failing() const {
  std::lock_guard lock(mutex_);
  return failing_;
}

StatementCache::~StatementCache() {
  for (auto& [sql, stmt] : idle) sqlite3_finalize(stmt);
}

void Statement::GiveBack::operator()(sqlite3_stmt* stmt) {
  auto kept = cache.lock();
  if (!kept) {
    sqlite3_finalize(stmt);
    return;
  }
  // A statement left mid-rows holds its read open until reset.
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  kept->idle.emplace(std::move(sql), stmt);
}

Statement& Statement::Bind(int index, std::string_view text) {
  int rc = sqlite3_bind_text(stmt_.get(), index, text.data(), static_cast<int>(text.size()),
                             SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_.get(), index, value);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, std::optional<int64_t> value) {
  return value ? Bind(index, *value) : BindNull(index);
}

Statement& Statement::BindNull(int index) {
  int rc = sqlite3_bind_null(stmt_.get(), index);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

sys::Result<bool> Statement::Step() {
  if (bind_error_ != SQLITE_OK) {
    return std::unexpected(
        sys::Error(std::string("sqlite bind: ") + sqlite3_errstr(bind_error_), EINVAL));
  }
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  // (BEGIN and COMMIT count as read-only: only migrations use them.)
  const bool write = !sqlite3_stmt_readonly(stmt_.get());
  if (rc == SQLITE_DONE) {
    if (write) health_->Succeeded();
    return false;
  }
  sys::Error error = SqlError(db_, sqlite3_sql(stmt_.get()), rc);
  // A write the store refused for what it was (a duplicate id, say) says
  // nothing of whether the store can write.
  const int primary = rc & 0xff;
  const bool refused = primary == SQLITE_CONSTRAINT || primary == SQLITE_TOOBIG ||
                       primary == SQLITE_MISMATCH || primary == SQLITE_RANGE;
  if (write && !refused) health_->Failed(error);
  return std::unexpected(std::move(error));
}

sys::Result<void> Statement::Run() {
  while (true) {
    CORDON_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return {};
  }
}

bool Statement::IsNull(int column) const {
  return sqlite3_column_type(stmt_.get(), column) == SQLITE_NULL;
}

int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_.get(), column); }

std::string Statement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_.get(), column);
  int size = sqlite3_column_bytes(stmt_.get(), column);
  return text ? std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(size))
              : std::string();
}

sys::Result<Database> Database::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  Database db(raw);
  if (rc != SQLITE_OK) {
    std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    return sys::Fail("sqlite open(\"" + path + "\"): " + msg, raw ? ErrnoOf(raw, rc) : EIO);
  }
  sqlite3_busy_timeout(raw, 10000);
  // Every `cordon run` opens and closes the store. By default the last
  // connection to close checkpoints the WAL into the database (two fsyncs)
  // and deletes it: about a millisecond per run. Instead the WAL stays and
  // is checkpointed every 64 pages; the next first connection then rebuilds
  // its index from at most that many frames. Measured here: 0.4 ms for
  // open + three transactions + close, against 1.1 ms (bench/README.md).
  sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  int persist = 1;
  sqlite3_file_control(raw, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  sqlite3_wal_autocheckpoint(raw, kCheckpointPages);
  // WAL: readers never block the writer; NORMAL is durable across a crash of
  // the process (the case that matters: a killed supervisor) without an
  // fsync per transaction.
  CORDON_RETURN_IF_ERROR(db.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"));
  return db;
}

sys::Result<std::unique_ptr<Checkpointer>> Checkpointer::Start(Database& main,
                                                               const std::string& path, int pages) {
  CORDON_ASSIGN_OR_RETURN(Database own, Database::Open(path));
  std::unique_ptr<Checkpointer> checkpointer(
      new Checkpointer(main.handle(), std::move(own), pages));
  // Replaces the autocheckpoint, which is itself a WAL hook.
  sqlite3_wal_hook(main.handle(), &Checkpointer::OnCommit, checkpointer.get());
  return checkpointer;
}

Checkpointer::Checkpointer(sqlite3* main, Database own, int pages)
    : main_(main),
      own_(std::move(own)),
      pages_(pages),
      thread_(sys::QuietThread([this] { Loop(); })) {}

Checkpointer::~Checkpointer() {
  sqlite3_wal_hook(main_, nullptr, nullptr);
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

uint64_t Checkpointer::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

// After each commit of `main`, in the committing thread, with the frames
// now in its WAL.
int Checkpointer::OnCommit(void* self, sqlite3*, const char*, int pages) {
  auto* c = static_cast<Checkpointer*>(self);
  if (pages < c->pages_) return SQLITE_OK;
  {
    std::lock_guard lock(c->mutex_);
    c->due_ = true;
  }
  c->wake_.notify_one();
  return SQLITE_OK;
}

void Checkpointer::Loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return due_ || stopping_; });
    if (stopping_) return;
    due_ = false;
    lock.unlock();
    // A failure (SQLITE_BUSY: another process's connection checkpointing)
    // leaves the frames for the next commit's turn.
    (void)sqlite3_wal_checkpoint_v2(own_.handle(), "main", SQLITE_CHECKPOINT_PASSIVE, nullptr,
                                    nullptr);
    lock.lock();
    ++done_;
  }
}

sys::Result<Statement> Database::Prepare(std::string_view sql) {
  Statement::GiveBack give_back{cache_, std::string(sql)};
  if (auto it = cache_->idle.find(sql); it != cache_->idle.end()) {
    sqlite3_stmt* stmt = it->second;
    cache_->idle.erase(it);
    return Statement(db_.get(), stmt, std::move(give_back), health_.get());
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return std::unexpected(SqlError(db_.get(), "prepare", rc));
  return Statement(db_.get(), stmt, std::move(give_back), health_.get());
}

sys::Result<void> Database::Exec(std::string_view sql) {
  std::string text(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_.get(), text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return sys::Fail("sqlite exec: " + msg, ErrnoOf(db_.get(), rc));
  }
  return {};
}

namespace {

sys::Result<void> RunKept(Database& db, std::string_view sql) {
  CORDON_ASSIGN_OR_RETURN(Statement s, db.Prepare(sql));
  return s.Run();
}

}  // namespace

sys::Result<Transaction> Transaction::Begin(Database& db) {
  CORDON_RETURN_IF_ERROR(RunKept(db, "BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_ != nullptr) (void)RunKept(*db_, "ROLLBACK");
}

sys::Result<void> Transaction::Commit() {
  Database* db = std::exchange(db_, nullptr);
  return RunKept(*db, "COMMIT");
}

}  // namespace cordon::store
