#include "store/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "support.h"

namespace cordon::store {
namespace {

GrantRecord Sample(const std::string& id) {
  GrantRecord g;
  g.id = id;
  g.owner = "agent-7";
  g.spec = {{"argv", {"/bin/echo", "hi"}}};
  g.enforced = {"process_tree"};
  g.cgroups = {{"v2", "/sys/fs/cgroup/x/" + id}};
  g.supervisor = proc::ReadIdentity(::getpid()).value();
  g.created_at_ms = NowMs();
  return g;
}

TEST(StoreTest, GrantsGoFromActiveToReleasedAndSurviveReopening) {
  testing::TempDir dir;
  {
    auto store = Store::Open(dir / "state");
    ASSERT_TRUE(store) << store.error().message();
    EXPECT_EQ(store->schema_version(), 5);
    ASSERT_TRUE(store->InsertGrant(Sample("g1")));
    ASSERT_TRUE(store->InsertGrant(Sample("g2")));
    proc::Identity id{1234, 1, 99, "boot"};
    ASSERT_TRUE(store->RecordStart("g1", id, 1234));
    ASSERT_TRUE(store->SetGrantOwner("g1", "session:taken"));
    ASSERT_TRUE(store->RecordRelease("g1", "exited", {{"dead", true}}, true));
    ASSERT_TRUE(
        store->RecordRelease("g2", "timed_out", {{"dead", false}, {"survivors", {7}}}, false));
  }
  // The state directory is private.
  struct stat st {};
  ASSERT_EQ(::stat((dir / "state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store);
  auto active = store->ListGrants(false).value();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].id, "g2");  // death unverified: still active, naming survivors
  EXPECT_EQ(active[0].release["survivors"][0], 7);
  auto g1 = store->GetGrant("g1").value();
  ASSERT_TRUE(g1);
  EXPECT_EQ(g1->state, "released");
  EXPECT_EQ(g1->outcome, "exited");
  EXPECT_EQ(g1->owner, "session:taken");
  EXPECT_EQ(store->GetGrant("g2").value()->owner, "agent-7");
  ASSERT_TRUE(g1->identity);
  EXPECT_EQ(g1->identity->start_ticks, 99u);
  EXPECT_EQ(g1->pgid, 1234);
  EXPECT_TRUE(g1->released_at_ms);
  EXPECT_EQ(g1->supervisor.pid, ::getpid());
  EXPECT_EQ(g1->spec["argv"][1], "hi");
  EXPECT_EQ(store->ListGrants(true).value().size(), 2u);
  EXPECT_FALSE(store->GetGrant("nope").value());
  nlohmann::json j = ToJson(*g1);
  EXPECT_EQ(j["identity"]["pid"], 1234);
  EXPECT_EQ(j["identity"]["boot_id"], "boot");
}

TEST(StoreTest, ADuplicateIdIsAnError) {
  testing::TempDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->InsertGrant(Sample("same")));
  EXPECT_FALSE(store->InsertGrant(Sample("same")));
}

TEST(StoreTest, AFailedWriteIsReportedUntilOneSucceeds) {
  testing::TempDir dir;
  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store) << store.error().message();
  EXPECT_FALSE(store->failing_writes());
  ASSERT_TRUE(store->InsertGrant(Sample("g1")));
  // Refused for what it was: the store itself is fine.
  EXPECT_FALSE(store->InsertGrant(Sample("g1")));
  EXPECT_FALSE(store->failing_writes());

  // The grants table taken away by another connection: writes fail.
  auto other = Database::Open(dir / "state/cordon.db");
  ASSERT_TRUE(other) << other.error().message();
  ASSERT_TRUE(other->Exec("ALTER TABLE grants RENAME TO grants_away"));
  EXPECT_FALSE(store->InsertGrant(Sample("g2")));
  auto failing = store->failing_writes();
  ASSERT_TRUE(failing);
  EXPECT_NE(failing->error.find("no such table: grants"), std::string::npos) << failing->error;
  EXPECT_LE(failing->since_ms, NowMs());
  EXPECT_GT(failing->since_ms, NowMs() - 60'000);
  // A read, or another failure, changes nothing: the first failure stays.
  EXPECT_TRUE(store->ListSessions("", {}));
  EXPECT_FALSE(store->RecordRelease("g1", "exited", {{"dead", true}}, true));
  auto still = store->failing_writes();
  ASSERT_TRUE(still);
  EXPECT_EQ(still->since_ms, failing->since_ms);
  EXPECT_EQ(still->error, failing->error);

  // A write that succeeds ends it.
  ASSERT_TRUE(other->Exec("ALTER TABLE grants_away RENAME TO grants"));
  ASSERT_TRUE(store->InsertGrant(Sample("g2")));
  EXPECT_FALSE(store->failing_writes());
}

TEST(StoreTest, RefusesADatabaseFromANewerCordon) {
  testing::TempDir dir;
  { ASSERT_TRUE(Store::Open(dir.path())); }
  {
    auto db = Database::Open(dir / "cordon.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->Exec("PRAGMA user_version = 99"));
  }
  auto store = Store::Open(dir.path());
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message().find("newer"), std::string::npos);
}

TEST(StoreTest, UsesWriteAheadLogging) {
  testing::TempDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store);
  auto db = Database::Open(dir / "cordon.db");
  ASSERT_TRUE(db);
  auto mode = db->Prepare("PRAGMA journal_mode");
  ASSERT_TRUE(mode);
  ASSERT_TRUE(mode->Step().value());
  EXPECT_EQ(mode->Text(0), "wal");
}

TEST(StateDirTest, FlagThenEnvironmentThenDefault) {
  EXPECT_EQ(ResolveStateDir(std::string("/x")).value(), "/x");
  EXPECT_FALSE(ResolveStateDir(std::string("")));
  ::setenv("CORDON_STATE_DIR", "/from/env", 1);
  EXPECT_EQ(ResolveStateDir(std::nullopt).value(), "/from/env");
  ::unsetenv("CORDON_STATE_DIR");
  if (::geteuid() == 0) {
    EXPECT_EQ(ResolveStateDir(std::nullopt).value(), "/var/lib/cordon");
  }
}

}  // namespace
}  // namespace cordon::store

namespace cordon::store {
namespace {

TEST(StoreTest, SessionsAreKeptOneRowPerId) {
  testing::TempDir dir;
  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store);
  SessionRecord r;
  r.id = "s1";
  r.workspace = "/w/s1";
  r.grant_id = "g";
  r.spec = {{"env_names", {"PATH"}}};
  ASSERT_TRUE(store->PutSession(r));
  r.generation = 2;
  r.state = "lost";
  r.problem = {{"message", "gone"}};
  ASSERT_TRUE(store->PutSession(r));
  auto all = store->ListSessions();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].generation, 2);
  EXPECT_EQ((*all)[0].state, "lost");
  EXPECT_EQ((*all)[0].problem["message"], "gone");
  r.state = "sleeping";
  EXPECT_FALSE(store->PutSession(r)) << "the state is checked";
}

// A database of the first schema gains the sessions table and keeps its grants.
TEST(StoreTest, MigratesAVersionOneDatabase) {
  testing::TempDir dir;
  {
    auto store = Store::Open(dir / "state");
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->InsertGrant(Sample("old")));
  }
  {
    auto db = Database::Open(dir / "state/cordon.db");
    ASSERT_TRUE(db);
    // A version-1 database has neither of the later tables.
    ASSERT_TRUE(
        db->Exec("DROP TABLE sessions; DROP TABLE jupyter_sessions; PRAGMA user_version = 1;"));
  }
  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store) << store.error().message();
  EXPECT_EQ(store->schema_version(), 5);
  EXPECT_TRUE(store->GetGrant("old").value());
  EXPECT_TRUE(store->ListSessions());
  EXPECT_TRUE(store->ListJupyterSessions());
}

JupyterSessionRecord Jupyter(const std::string& id, const std::string& path) {
  JupyterSessionRecord r;
  r.id = id;
  r.path = path;
  r.name = path + ".name";
  r.type = "notebook";
  r.kernel_id = "k-" + id;
  r.created_at_ms = NowMs();
  r.updated_at_ms = r.created_at_ms;
  return r;
}

TEST(StoreTest, JupyterSessionsAreKeptInCreationOrderAndSurviveReopening) {
  testing::TempDir dir;
  {
    auto store = Store::Open(dir / "state");
    ASSERT_TRUE(store);
    // Same millisecond on purpose: the order is the insertion order.
    JupyterSessionRecord b = Jupyter("b", "two.ipynb");
    JupyterSessionRecord a = Jupyter("a", "one.ipynb");
    a.created_at_ms = b.created_at_ms;
    ASSERT_TRUE(store->PutJupyterSession(b));
    ASSERT_TRUE(store->PutJupyterSession(a));
    // A change (rename, another kernel) keeps the row's place and creation time.
    b.path = "renamed.ipynb";
    b.kernel_id = "k-new";
    b.updated_at_ms = b.created_at_ms + 5;
    ASSERT_TRUE(store->PutJupyterSession(b));
  }
  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store);
  auto all = store->ListJupyterSessions();
  ASSERT_TRUE(all) << all.error().message();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "b");
  EXPECT_EQ((*all)[0].path, "renamed.ipynb");
  EXPECT_EQ((*all)[0].name, "two.ipynb.name");
  EXPECT_EQ((*all)[0].type, "notebook");
  EXPECT_EQ((*all)[0].kernel_id, "k-new");
  EXPECT_EQ((*all)[0].updated_at_ms, (*all)[0].created_at_ms + 5);
  EXPECT_EQ((*all)[1].id, "a");
  EXPECT_EQ((*all)[1].kernel_id, "k-a");

  ASSERT_TRUE(store->DeleteJupyterSession("b"));
  ASSERT_TRUE(store->DeleteJupyterSession("b")) << "deleting a missing id is not an error";
  all = store->ListJupyterSessions();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, "a");
}

// A database of the second schema (cordon before issue 14) gains the Jupyter
// sessions table and keeps its grants and sessions.
TEST(StoreTest, MigratesAVersionTwoDatabase) {
  testing::TempDir dir;
  {
    auto store = Store::Open(dir / "state");
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->InsertGrant(Sample("old")));
    SessionRecord r;
    r.id = "kernel";
    r.kind = "python";
    r.workspace = "/w/kernel";
    ASSERT_TRUE(store->PutSession(r));
  }
  {
    auto db = Database::Open(dir / "state/cordon.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->Exec(
        "DROP TABLE jupyter_sessions; DROP INDEX sessions_by_state; PRAGMA user_version = 2;"));
  }
  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store) << store.error().message();
  EXPECT_EQ(store->schema_version(), 5);
  EXPECT_TRUE(store->GetGrant("old").value());
  ASSERT_EQ(store->ListSessions().value().size(), 1u);
  EXPECT_TRUE(store->ListJupyterSessions().value().empty());
  EXPECT_TRUE(store->PutJupyterSession(Jupyter("new", "x.ipynb")));
}

// A database of the fourth schema, whose sessions all say kind "shell" in
// their column (the kind was in the spec alone), gets each one's own.
TEST(StoreTest, MigratesAVersionFourDatabaseToItsSessionsKinds) {
  testing::TempDir dir;
  {
    auto store = Store::Open(dir / "state");
    ASSERT_TRUE(store);
    for (const char* kind : {"shell", "python"}) {
      SessionRecord r;
      r.id = kind;
      r.kind = "shell";
      r.workspace = std::string("/w/") + kind;
      r.spec = {{"kind", kind}};
      ASSERT_TRUE(store->PutSession(r));
    }
    SessionRecord none;
    none.id = "unsaid";
    none.workspace = "/w/unsaid";
    ASSERT_TRUE(store->PutSession(none));
  }
  {
    auto db = Database::Open(dir / "state/cordon.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->Exec("PRAGMA user_version = 4;"));
  }
  auto store = Store::Open(dir / "state");
  ASSERT_TRUE(store) << store.error().message();
  EXPECT_EQ(store->schema_version(), 5);
  EXPECT_EQ(store->GetSession("python").value()->kind, "python");
  EXPECT_EQ(store->GetSession("shell").value()->kind, "shell");
  EXPECT_EQ(store->GetSession("unsaid").value()->kind, "shell");
}

TEST(StoreTest, SessionsAreFoundByIdAndListedByKindAndState) {
  testing::TempDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store);
  auto put = [&](const std::string& id, const std::string& kind, const std::string& state) {
    SessionRecord r;
    r.id = id;
    r.kind = kind;
    r.state = state;
    r.workspace = "/w/" + id;
    r.spec = {{"ttl_s", 60}};
    ASSERT_TRUE(store->PutSession(r));
  };
  put("a", "shell", "closed");
  put("b", "python", "closed");
  put("c", "python", "invalidated");
  put("d", "python", "ready");
  put("e", "shell", "lost");
  auto ids = [&](const std::string& kind, const std::vector<std::string>& except) {
    std::vector<std::string> out;
    auto rows = store->ListSessions(kind, except);
    EXPECT_TRUE(rows);
    for (const auto& r : *rows) out.push_back(r.id);
    return out;
  };
  EXPECT_EQ(ids("", {}), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(ids("python", {"closed"}), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(ids("", {"closed", "invalidated"}), (std::vector<std::string>{"d", "e"}));
  EXPECT_EQ(ids("shell", {"closed", "lost"}), std::vector<std::string>{});

  auto c = store->GetSession("c");
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->kind, "python");
  EXPECT_EQ((*c)->state, "invalidated");
  EXPECT_EQ((*c)->spec["ttl_s"], 60);
  auto none = store->GetSession("nope");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

// Listed a page at a time (the lock let go between pages): every row
// still comes, once, in order, its JSON parsed.
TEST(StoreTest, ManySessionsAreListedWholeAndInOrder) {
  testing::TempDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store);
  constexpr int kRows = 1000;
  for (int i = 0; i < kRows; ++i) {
    SessionRecord r;
    char id[16];
    std::snprintf(id, sizeof id, "s%04d", i);
    r.id = id;
    r.state = i % 3 == 0 ? "ready" : "closed";
    r.workspace = std::string("/w/") + id;
    r.spec = {{"n", i}};
    ASSERT_TRUE(store->PutSession(r));
  }
  auto all = store->ListSessions();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), static_cast<size_t>(kRows));
  for (int i = 0; i < kRows; ++i) {
    ASSERT_EQ((*all)[i].spec["n"], i);
    ASSERT_EQ((*all)[i].workspace, "/w/" + (*all)[i].id);
  }
  auto live = store->ListSessions("", {"closed"});
  ASSERT_TRUE(live);
  EXPECT_EQ(live->size(), static_cast<size_t>((kRows + 2) / 3));
  for (const auto& r : *live) EXPECT_EQ(r.state, "ready");

  // A page: the rows after an id (which need not exist), at most so many,
  // across the store's own pages of 256.
  auto page = store->ListSessions("", {}, "s0099x", 300);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->size(), 300u);
  EXPECT_EQ(page->front().id, "s0100");
  EXPECT_EQ(page->back().id, "s0399");
  auto ready = store->ListSessions("", {"closed"}, "s0990", 5);
  ASSERT_TRUE(ready);
  ASSERT_EQ(ready->size(), 3u);  // s0993, s0996, s0999: fewer than asked
  EXPECT_EQ(ready->back().id, "s0999");
  EXPECT_TRUE(store->ListSessions("", {}, "s0999", 10).value().empty());
  EXPECT_EQ(store->ListSessions("", {}, "", 256).value().size(), 256u);
}

TEST(StoreTest, PruningForgetsOnlyWhatEndedBeforeTheCutoff) {
  testing::TempDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->InsertGrant(Sample("running")));
  ASSERT_TRUE(store->InsertGrant(Sample("survivors")));
  ASSERT_TRUE(store->RecordRelease("survivors", "timed_out", {{"dead", false}}, false));
  const int64_t before_release = NowMs() - 1;
  for (const char* id : {"r1", "r2", "r3", "r4", "r5"}) {
    ASSERT_TRUE(store->InsertGrant(Sample(id)));
    ASSERT_TRUE(store->RecordRelease(id, "exited", {{"dead", true}}, true));
  }
  EXPECT_EQ(store->PruneGrants(before_release, 100).value(), 0);
  const int64_t after = NowMs() + 1000;
  // At most `limit` at a time.
  EXPECT_EQ(store->PruneGrants(after, 2).value(), 2);
  EXPECT_EQ(store->PruneGrants(after, 2).value(), 2);
  EXPECT_EQ(store->PruneGrants(after, 2).value(), 1);
  EXPECT_EQ(store->PruneGrants(after, 2).value(), 0);
  // What reap needs stays: a grant not released, whatever its age.
  auto left = store->ListGrants(true).value();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_TRUE(store->GetGrant("running").value());
  EXPECT_TRUE(store->GetGrant("survivors").value());

  auto session = [&](const std::string& id, const std::string& state, int64_t updated) {
    SessionRecord r;
    r.id = id;
    r.state = state;
    r.workspace = "/w/" + id;
    r.created_at_ms = 1;
    r.updated_at_ms = updated;
    ASSERT_TRUE(store->PutSession(r));
  };
  session("closed-old", "closed", 1000);
  session("invalidated-old", "invalidated", 1000);
  session("lost-old", "lost", 1000);
  session("quarantined-old", "quarantined", 1000);
  session("ready-old", "ready", 1000);
  session("closed-new", "closed", 5000);
  auto gone = store->PruneSessions(2000, 100).value();
  std::sort(gone.begin(), gone.end());
  const std::vector<std::string> ended = {"closed-old", "invalidated-old"};
  EXPECT_EQ(gone, ended);
  std::vector<std::string> kept;
  auto rows = store->ListSessions();
  ASSERT_TRUE(rows);
  for (const auto& r : *rows) kept.push_back(r.id);
  const std::vector<std::string> rest = {"closed-new", "lost-old", "quarantined-old", "ready-old"};
  EXPECT_EQ(kept, rest);
  EXPECT_TRUE(store->PruneSessions(2000, 100).value().empty());
}

TEST(StoreTest, ABackgroundCheckpointerCopiesTheWalIntoTheDatabase) {
  testing::TempDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->CheckpointInBackground());
  struct stat before {};
  ASSERT_EQ(::stat((dir / "cordon.db").c_str(), &before), 0);
  // Well past kCheckpointPages of WAL (a grant row is about 2 KiB).
  for (int i = 0; i < 400; ++i) {
    auto g = Sample("g" + std::to_string(i));
    g.spec["padding"] = std::string(2048, 'x');
    ASSERT_TRUE(store->InsertGrant(g));
  }
  struct stat after {};
  for (int i = 0; i < 1000 && store->background_checkpoints() == 0; ++i) ::usleep(10'000);
  EXPECT_GT(store->background_checkpoints(), 0u);
  // What the checkpoints copied is in the database file itself.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(::stat((dir / "cordon.db").c_str(), &after), 0);
    if (after.st_size > before.st_size + (256 << 10)) break;
    ::usleep(10'000);
  }
  EXPECT_GT(after.st_size, before.st_size + (256 << 10));
  // And the store reads whole, here and from another connection.
  EXPECT_EQ(store->ListGrants(true).value().size(), 400u);
  auto other = Store::Open(dir.path());
  ASSERT_TRUE(other);
  EXPECT_EQ(other->ListGrants(true).value().size(), 400u);
}

// A connection keeps its prepared statements for the next Prepare of the
// same SQL: each is handed out reset, unbound and to one user at a time.
TEST(DatabaseTest, AKeptStatementComesBackResetUnboundAndNeverShared) {
  testing::TempDir dir;
  auto db = Database::Open(dir / "kept.db");
  ASSERT_TRUE(db) << db.error().message();
  ASSERT_TRUE(db->Exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3)"));
  const std::string_view select = "SELECT x FROM t ORDER BY x";
  auto first_row = [&](Statement& s) { return s.Step().value() ? s.Int(0) : -1; };
  {
    auto a = db->Prepare(select);
    ASSERT_TRUE(a);
    ASSERT_EQ(first_row(*a), 1);
    ASSERT_TRUE(a->Step().value());
    EXPECT_EQ(a->Int(0), 2);
    // While `a` is live, the same SQL is another statement, from the start.
    auto b = db->Prepare(select);
    ASSERT_TRUE(b);
    EXPECT_EQ(first_row(*b), 1);
    ASSERT_TRUE(a->Step().value());
    EXPECT_EQ(a->Int(0), 3);
  }
  // Ended mid-rows, it comes back at its first row.
  auto again = db->Prepare(select);
  ASSERT_TRUE(again);
  EXPECT_EQ(first_row(*again), 1);
  {
    auto bound = db->Prepare("SELECT ?1 IS NULL");
    ASSERT_TRUE(bound);
    bound->Bind(1, int64_t{5});
    EXPECT_EQ(first_row(*bound), 0);
  }
  auto unbound = db->Prepare("SELECT ?1 IS NULL");
  ASSERT_TRUE(unbound);
  EXPECT_EQ(first_row(*unbound), 1);
  // No kept statement holds its read: the table can go (SQLite refuses to
  // drop a table that a statement is still reading).
  again = db->Prepare("SELECT 1");
  ASSERT_TRUE(again);
  EXPECT_TRUE(db->Exec("DROP TABLE t"));
  // A statement that outlives its connection is finalized, not kept.
  auto late = db->Prepare("SELECT 2");
  ASSERT_TRUE(late);
  *db = std::move(Database::Open(dir / "other.db").value());
  EXPECT_EQ(first_row(*late), 2);
}

}  // namespace
}  // namespace cordon::store
