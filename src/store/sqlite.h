// A thin RAII layer over SQLite's C API: a connection and prepared
// statements, with errors as values.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "sys/error.h"

namespace cordon::store {

// A connection's prepared statements not in use, by their SQL: the store
// runs the same few for every grant, and preparing one costs more than
// running it.
struct StatementCache {
  StatementCache() = default;
  StatementCache(const StatementCache&) = delete;
  StatementCache& operator=(const StatementCache&) = delete;
  ~StatementCache();
  std::multimap<std::string, sqlite3_stmt*, std::less<>> idle;
};

// What a connection's writes (statements that change the database) came
// to last: from a write that failed until one succeeds, the first error of
// that run of failures and when it came. A write refused for what it was
// (a constraint) is neither. Any thread.
class WriteHealth final {
 public:
  struct Failing {
    std::string error;
    int64_t since_ms;  // since the epoch
  };
  void Succeeded();
  void Failed(const sys::Error& error);
  std::optional<Failing> failing() const;

 private:
  std::atomic<bool> failing_now_{false};  // a write's success looks only here
  mutable std::mutex mutex_;
  std::optional<Failing> failing_;
};

class Statement final {
 public:
  Statement(Statement&&) noexcept = default;
  Statement& operator=(Statement&&) noexcept = default;

  // Binds by 1-based index. An empty optional binds NULL.
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, std::optional<int64_t> value);
  Statement& BindNull(int index);

  // Steps once: true when a row is available, false when done.
  sys::Result<bool> Step();
  // Steps until done (for statements without rows).
  sys::Result<void> Run();

  bool IsNull(int column) const;
  int64_t Int(int column) const;
  std::string Text(int column) const;

 private:
  friend class Database;
  // Ends a statement: reset and back to its connection's cache, or
  // finalized when the connection is gone.
  struct GiveBack {
    std::weak_ptr<StatementCache> cache;
    std::string sql;
    void operator()(sqlite3_stmt* stmt);
  };
  Statement(sqlite3* db, sqlite3_stmt* stmt, GiveBack give_back, WriteHealth* health)
      : db_(db), stmt_(stmt, std::move(give_back)), health_(health) {}
  sqlite3* db_;
  std::unique_ptr<sqlite3_stmt, GiveBack> stmt_;
  WriteHealth* health_;
  int bind_error_ = SQLITE_OK;
};

// The WAL's size, in pages, at which it is checkpointed.
inline constexpr int kCheckpointPages = 64;

class Database final {
 public:
  // Opens (creating) the file, in WAL mode with a busy timeout so that
  // concurrent supervisors wait for each other instead of failing.
  static sys::Result<Database> Open(const std::string& path);

  // A statement of `sql`: one of the connection's kept ones where one is
  // idle, else a new one, kept once it ends.
  sys::Result<Statement> Prepare(std::string_view sql);
  sys::Result<void> Exec(std::string_view sql);  // one or more statements, no rows
  sqlite3* handle() const { return db_.get(); }
  const WriteHealth& write_health() const { return *health_; }

 private:
  explicit Database(sqlite3* db)
      : db_(db, &sqlite3_close_v2), cache_(std::make_shared<StatementCache>()) {}
  std::unique_ptr<WriteHealth> health_ = std::make_unique<WriteHealth>();  // stays put on a move
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> db_;
  std::shared_ptr<StatementCache> cache_;  // after db_: finalized before it closes
};

// Checkpoints a connection's WAL from a thread of its own, with a second
// connection to the same file, instead of in the commit that takes the WAL
// past `pages` (SQLite's autocheckpoint): the checkpoint's two fsyncs then
// never hold up the connection's owner (the daemon's event loop). The
// checkpoints are PASSIVE: they copy what they can without waiting for the
// writer, which keeps writing meanwhile. Destroyed before `main`.
class Checkpointer final {
 public:
  static sys::Result<std::unique_ptr<Checkpointer>> Start(Database& main, const std::string& path,
                                                          int pages);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Checkpoints run so far (each as complete as the writer allowed).
  uint64_t done() const;

 private:
  Checkpointer(sqlite3* main, Database own, int pages);
  static int OnCommit(void* self, sqlite3* db, const char* name, int pages);
  void Loop();

  sqlite3* const main_;
  Database own_;
  const int pages_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool due_ = false;
  bool stopping_ = false;
  uint64_t done_ = 0;
  std::thread thread_;  // last: started once the rest is ready
};

// An IMMEDIATE transaction, rolled back unless committed.
class Transaction final {
 public:
  static sys::Result<Transaction> Begin(Database& db);
  Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Transaction(const Transaction&) = delete;
  ~Transaction();
  sys::Result<void> Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_;
};

}  // namespace cordon::store
