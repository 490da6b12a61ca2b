#include "session/sessions.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "contain/grant.h"
#include "contain/mounts.h"
#include "contain/reap.h"
#include "session/workspace.h"
#include "sys/random.h"
#include "sys/text.h"

namespace cordon::session {
namespace {

// An exec whose deadline passed while it waited its turn: it never ran.
void AnswerNeverRan(const std::function<void(Outcome<ExecResult>)>& done) {
  ExecResult never;
  never.timed_out = true;
  done(never);
}

using Kind = Error::Kind;
using Clock = std::chrono::steady_clock;

// Quoted, a command takes up to 4 bytes per byte on the shell's 1 MiB
// command pipe, and it must fit in one write.
constexpr size_t kMaxCommandBytes = 200 << 10;

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string NewSessionId() { return "s-" + sys::RandomHex(8); }

// The declared environment plus the fixed allowlist, and nothing of the
// daemon's own (DESIGN.md §1.3): what a caller declares wins.
void AddAllowlist(contain::Spec& spec, const contain::Probe& probe, const std::string& workspace,
                  const std::string& kind) {
  // Inside a sandbox's own mount namespace the workspace is at /workspace.
  // Where the host has no namespaces to give (user namespaces refused), an
  // isolated session runs without them, in the workspace's host path.
  const bool sandboxed = spec.isolation.enabled() && probe.isolation.namespaces.available;
  const std::string home = sandboxed ? contain::kSandboxWorkspace : workspace;
  auto has = [&](const std::string& name) {
    return std::any_of(spec.env.begin(), spec.env.end(),
                       [&](const auto& e) { return e.first == name; });
  };
  const std::pair<const char*, std::string> allowlist[] = {
      {"PATH", kDefaultPath}, {"HOME", home}, {"LANG", "C.UTF-8"}, {"TERM", "dumb"}};
  for (const auto& [name, value] : allowlist) {
    // A kernel has no terminal; its JUPYTER_* dirs are the kernel's own
    // (kernel.cc adds them, where it knows the runtime directory).
    if (kind == "python" && std::string_view(name) == "TERM") continue;
    if (!has(name)) spec.env.emplace_back(name, value);
  }
}

// A daemon that stops leaves no workspace filesystem (a loop image)
// mounted but a quarantined session's (processes may still use it): the
// images stay, and a session's next generation mounts its own again. (A
// killed daemon leaves them mounted; the next one keeps them so, a lost
// session's files in place, until it stops.) Every workspace on disk is
// looked at: an ended session's kept one is no longer held in memory.
template <typename SessionMap>
void ReleaseIdleWorkspaces(const std::string& state_dir, const SessionMap& sessions) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/workspaces", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || name.ends_with(".img")) continue;  // the pool's; images
    if (auto it = sessions.find(name); it != sessions.end()) {
      const std::string& st = it->second->state;
      if (st == "starting" || st == "ready" || st == "busy" || st == "quarantined") continue;
    }
    (void)contain::ReleaseWorkspace(entry.path().string());
  }
}

// A runtime launched (on a worker, or here), attached on the loop. (One
// whose Attach fails kills its tree as it is destroyed, as a run's does:
// run::Execution.)
std::expected<std::unique_ptr<Runtime>, contain::AdmitError> Attached(
    std::expected<std::unique_ptr<Runtime>, contain::AdmitError> runtime) {
  if (!runtime) return runtime;
  if (auto attached = (*runtime)->Attach(); !attached) {
    return std::unexpected(contain::AdmitError{
        contain::AdmitError::Kind::kInternal, "", attached.error().message(), {}});
  }
  return runtime;
}

// `why`: why the runtime ended or was torn down, if known (empty
// otherwise). It is kept as the problem's `cause`, so that each retry that
// fails again says it too, after a restart as well (the problem is recorded).
nlohmann::json Survivors(const contain::Release& r, const std::string& why) {
  nlohmann::json problem = {
      {"message", (why.empty() ? std::string() : why + "; then its ") +
                      "teardown could not be verified: " +
                      (r.problem.empty() ? std::string("processes are still alive") : r.problem)},
      {"survivors", r.survivors}};
  if (!why.empty()) problem["cause"] = why;
  return problem;
}

std::string RuntimeName(const std::string& kind) {
  return kind == "python" ? "the kernel" : "the shell";
}

// Why a runtime of `kind` ended, as its session's problem says it: what the
// runtime knows, or else what its end was.
std::string EndedWhy(const std::string& kind, const Runtime::Ended& ended, bool was_starting) {
  if (!ended.why.empty()) return ended.why;
  const std::string what = RuntimeName(kind);
  if (ended.end == Runtime::End::kInvalidated) {
    return what + " did not come back within the grace after SIGINT; its tree was torn down";
  }
  if (was_starting) return what + " exited during startup";
  if (kind == "python") return "the kernel died";
  return ended.exec ? "the command ended the shell" : "the shell died between executions";
}

}  // namespace

sys::Result<std::unique_ptr<Sessions>> Sessions::Create(sys::Reactor& reactor, store::Store& store,
                                                        contain::Signaller& signaller,
                                                        const contain::Probe& probe,
                                                        SessionOptions options, Observer observer) {
  std::unique_ptr<Sessions> s(
      new Sessions(reactor, store, signaller, probe, std::move(options), std::move(observer)));
  CORDON_ASSIGN_OR_RETURN(s->tick_, Alarm::Create(reactor));
  Sessions* self = s.get();
  s->tick_->Set(s->options_.tick, [self] { self->Tick(); });
  return s;
}

Sessions::~Sessions() = default;

Outcome<Sessions::Session*> Sessions::Find(const std::string& id) {
  if (auto it = sessions_.find(id); it != sessions_.end()) return it->second.get();
  // An ended session is kept on record only (Tick lets it go): what it
  // was is read back, and it is held again until it has settled.
  auto record = store_.GetSession(id);
  if (!record) {
    return Failure(Kind::kInternal,
                   "cannot read session " + id + "'s record: " + record.error().message());
  }
  if (!*record) return nullptr;
  std::unique_ptr<Session> loaded = FromRecord(**record);
  if (loaded->state != "closed" && loaded->state != "invalidated") {
    // Every other state is held from Recover on; a record that says live
    // without a runtime here would be believed by nothing.
    loaded->state = "lost";
  }
  Session* s = loaded.get();
  sessions_.emplace(id, std::move(loaded));
  return s;
}

std::unique_ptr<Sessions::Session> Sessions::FromRecord(const store::SessionRecord& r) {
  auto s = std::make_unique<Session>();
  s->id = r.id;
  s->generation = r.generation;
  s->state = r.state;
  s->grant_id = r.grant_id;
  s->kind = r.kind;
  s->summary = r.spec;
  s->ttl_ms = s->summary.value("ttl_s", int64_t{0}) * 1000;
  s->summary.erase("kind");  // (written by Record, as the row's kind)
  s->summary.erase("ttl_s");
  s->problem = r.problem;
  s->created_at_ms = r.created_at_ms;
  s->born = s->last_used = Clock::now();
  s->recorded = true;
  return s;
}

bool Sessions::Settled(const Session& s) const {
  return (s.state == "closed" || s.state == "invalidated") && s.recorded && !s.closing &&
         !s.removing && !s.relaunching && !s.retrying && !s.runtime && s.file_operations == 0 &&
         s.queue.empty() && s.create_waiters.empty() && s.delete_waiters.empty() &&
         s.restart_waiters.empty() && !preparing_.contains(s.id);
}

// The OOM kills of the session's memory group so far; none without one.
std::optional<uint64_t> Sessions::OomKills(const Session& s) {
  if (!s.runtime || !s.runtime->grant().cgroups) return std::nullopt;
  auto kills = s.runtime->grant().cgroups->OomKills();
  if (!kills || !*kills) return std::nullopt;
  return **kills;
}

Outcome<Sessions::Session*> Sessions::Existing(const std::string& id) {
  CORDON_ASSIGN_OR_RETURN(Session * s, Find(id));
  if (!s) return Failure(Kind::kNotFound, "no session " + id);
  return s;
}

Sessions::Session* Sessions::Current(const std::string& id, int64_t generation) {
  // Held only: what a generation's runtime or worker reports back finds
  // its session held (it has not settled), never one read back.
  auto it = sessions_.find(id);
  return it != sessions_.end() && it->second->generation == generation ? it->second.get() : nullptr;
}

nlohmann::json Sessions::View(const Session& s) const {
  std::string state = s.state;
  if (state == "ready" && s.runtime && s.runtime->running()) state = "busy";
  nlohmann::json view = {
      {"id", s.id},
      {"kind", s.kind},
      {"state", state},
      // A DELETE or a cull under way: the state is the last one until the
      // session is closed.
      {"closing", s.closing},
      {"generation", s.generation},
      {"workspace", WorkspacePath(options_.state_dir, s.id)},
      {"grant_id", s.grant_id.empty() ? nlohmann::json() : nlohmann::json(s.grant_id)},
      {"queued", s.queue.size()},
      {"ttl_s", s.ttl_ms / 1000},
      {"created_at_ms", s.created_at_ms},
      {"spec", s.summary},
      // The effective limits (the request's, and the daemon's defaults for
      // the rest) and what the current runtime's grant enforces of them.
      {"limits", s.summary.value("limits", nlohmann::json::object())},
      {"grant", s.runtime ? run::ToJson(run::Summarize(s.runtime->grant())) : nlohmann::json()},
      {"problem", s.problem}};
  if (s.kind == "python") {
    // A kernel's own state, as the Kernel Gateway reports it.
    view["execution_state"] = "dead";
    if (state == "starting") view["execution_state"] = "starting";
    if (s.runtime && (state == "ready" || state == "busy")) s.runtime->Describe(view);
  }
  return view;
}

sys::Result<void> Sessions::Record(Session& s) {
  store::SessionRecord r;
  r.id = s.id;
  r.generation = s.generation;
  r.state = s.state;
  r.workspace = WorkspacePath(options_.state_dir, s.id);
  r.grant_id = s.grant_id;
  r.kind = s.kind;
  r.spec = s.summary;
  r.spec["kind"] = s.kind;
  r.spec["ttl_s"] = s.ttl_ms / 1000;
  r.problem = s.problem;
  r.created_at_ms = s.created_at_ms;
  r.updated_at_ms = store::NowMs();
  auto put = store_.PutSession(r);
  s.recorded = put.has_value();
  if (!put) Log("store_error", s, {{"error", put.error().message()}});
  return put;
}

Error Sessions::Unrecorded(Session& s, const sys::Error& why, bool keep_workspace) {
  // Unrecorded, it would be unknown to the next daemon after a crash: not
  // `lost`, its workspace swept by the next create of its id.
  const std::string message = "the session could not be recorded: " + why.message();
  s.problem = {{"message", message}};
  s.closing = true;
  s.keep_workspace = keep_workspace;
  s.runtime->Kill();
  return Error{Kind::kInternal, "session " + s.id + ": " + message, "", nullptr};
}

void Sessions::Log(const std::string& event, const Session& s, nlohmann::json fields) {
  if (!observer_.log) return;
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["session_id"] = s.id;
  fields["generation"] = s.generation;
  fields["state"] = s.state;
  observer_.log(event, fields);
}

size_t Sessions::live() const {
  return static_cast<size_t>(std::count_if(sessions_.begin(), sessions_.end(), [](const auto& e) {
    const std::string& st = e.second->state;
    return st == "starting" || st == "ready" || st == "busy";
  }));
}

size_t Sessions::quarantined() const {
  return static_cast<size_t>(std::count_if(sessions_.begin(), sessions_.end(), [](const auto& e) {
    return e.second->state == "quarantined";
  }));
}

size_t Sessions::quarantined(const std::string& kind) const {
  return static_cast<size_t>(std::count_if(sessions_.begin(), sessions_.end(), [&](const auto& e) {
    return e.second->kind == kind && e.second->state == "quarantined";
  }));
}

sys::Result<void> Sessions::Recover() {
  // Ended sessions stay on record, read back when asked for (Find).
  CORDON_ASSIGN_OR_RETURN(std::vector<store::SessionRecord> records,
                          store_.ListSessions("", {"closed", "invalidated"}));
  for (const auto& r : records) {
    std::unique_ptr<Session> s = FromRecord(r);
    if (r.state == "starting" || r.state == "ready" || r.state == "busy") {
      s->state = "lost";
      s->problem = {{"message",
                     "the daemon stopped without closing the session; its processes "
                     "were reaped at restart and its workspace kept"}};
      Record(*s);
      Log("session_lost", *s);
    } else if (r.state == "quarantined") {
      auto grant = store_.GetGrant(r.grant_id);
      if (grant && (!*grant || (*grant)->state == "released")) {
        s->state = "closed";
        s->problem = nullptr;
        Record(*s);
      }
    }
    sessions_.emplace(r.id, std::move(s));
  }
  // Pool workspaces of an earlier daemon (its runtimes were reaped).
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(options_.state_dir + "/workspaces", ec)) {
    // (Its images go with their directories.)
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".warm-") && !name.ends_with(".img")) {
      (void)contain::RemoveBoundWorkspace(entry.path().string());
    }
  }
  FillPool();
  return {};
}

sys::Result<size_t> Sessions::Forget(int64_t before_ms, int64_t limit) {
  CORDON_ASSIGN_OR_RETURN(std::vector<std::string> ids, store_.PruneSessions(before_ms, limit));
  for (const auto& id : ids) {
    // Its record said it had ended, and each change is recorded at once;
    // a session that is anything else here is kept (its next record puts
    // the row back).
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    const Session& s = *it->second;
    if ((s.state == "closed" || s.state == "invalidated") && !s.closing && !s.runtime &&
        s.file_operations == 0 && s.queue.empty() && s.create_waiters.empty() &&
        s.delete_waiters.empty() && s.restart_waiters.empty()) {
      sessions_.erase(it);
    }
  }
  return ids.size();
}

Runtime::Events Sessions::EventsOf(const std::string& id, int64_t generation) {
  Runtime::Events events;
  events.ready = [this, id, generation] { OnReady(id, generation); };
  events.ended = [this, id, generation](Runtime::Ended ended) {
    OnEnded(id, generation, std::move(ended));
  };
  return events;
}

Sessions::MadeRuntime Sessions::Launch(const std::string& kind, const std::string& id,
                                       const contain::Spec& spec, Runtime::Events events) {
  if (kind == "python") return options_.python(id, spec, std::move(events), ReleaseElsewhere());
  auto shell = Shell::Spawn(reactor_, store_, signaller_, probe_, spec, options_.verify_timeout,
                            std::move(events), ReleaseElsewhere());
  if (!shell) return std::unexpected(shell.error());
  return std::unique_ptr<Runtime>(std::move(*shell));
}

void Sessions::Relaunch(Session& s, const std::string& what) {
  // Starting, without a runtime until the worker's is attached: execs
  // queue, a create of its id or a restart waits for its ready, a delete
  // waits for its launch.
  s.state = "starting";
  s.relaunching = true;
  s.starting_since = Clock::now();
  Offload(
      [this, kind = s.kind, id = s.id, spec = s.spec, events = EventsOf(s.id, s.generation)] {
        return Launch(kind, id, spec, events);
      },
      [this, id = s.id, generation = s.generation, what](MadeRuntime made) {
        // Nothing replaces or forgets a session while it relaunches (a
        // create of its id waits, a delete marks it closing, a stop waits
        // for this).
        Session* current = Current(id, generation);
        if (!current) return;  // (the runtime, never attached, kills its tree)
        Session& s = *current;
        s.relaunching = false;
        if (auto failed = Started(s, Attached(std::move(made)))) {
          s.state = "invalidated";
          KeepRevivable(s);
          s.problem = {{"message", what + " could not be restarted: " + failed->message}};
          Record(s);
          FailQueue(s, Error{Kind::kConflict, "session " + id + " is invalidated", "", s.problem});
          if (s.closing) Close(s);  // a delete came meanwhile
          return;
        }
        // The generation has its record already, which a failure here
        // leaves as it was.
        (void)Record(s);
        if (stopping_ && !s.closing) {
          // Launched as the daemon began to stop: it goes as the rest went.
          s.closing = true;
          s.keep_workspace = true;
        }
        if (s.closing) s.runtime->Kill();  // its end closes it
      });
}

std::optional<Error> Sessions::Started(Session& s, MadeRuntime runtime) {
  if (!runtime) return FromAdmit(runtime.error());
  s.runtime = std::move(*runtime);
  s.grant_id = s.runtime->grant_id();
  s.state = "starting";
  s.problem = nullptr;
  return std::nullopt;
}

Sessions::Prepared Sessions::Prepare(const std::string& id, const std::string& workspace,
                                     bool reuse, const contain::Spec& spec, Runtime::Events events,
                                     const std::string& kind) {
  Prepared p;
  auto made = PrepareWorkspace(options_.state_dir, id, !reuse,
                               probe_.SandboxesRunAsOwnUids() ? 0711 : 0700);
  if (!made) {
    p.made = Failure(Kind::kInternal, "cannot prepare the workspace: " + made.error().message());
    return p;
  }
  if (spec.limits.disk_bytes || spec.limits.disk_inodes) {
    // Its disk bound (a loop image or a project quota, kept across
    // generations); the runtime's admission observes it.
    auto bound = contain::BoundWorkspace(
        probe_.disk, workspace, contain::WorkspaceKind::kPersistent,
        contain::DiskLimits{spec.limits.disk_bytes, spec.limits.disk_inodes});
    if (!bound && contain::NoRoom(bound.error())) {
      p.made = Failure(Kind::kInternal, "cannot bound the workspace: " + bound.error().message());
      return p;
    }
    if (!bound) {
      const std::string why = "bounding the workspace failed: " + bound.error().message();
      p.unbounded = why;
      // A limit that would be refused is refused here, with why
      // bounding failed.
      if (spec.required.contains(contain::Capability::kDisk) ||
          (contain::Explicit(spec).contains(contain::Capability::kDisk) && !spec.permissive)) {
        p.made = std::unexpected(FromAdmit(contain::AdmitError{
            contain::AdmitError::Kind::kRefused,
            "",
            "refused: cannot enforce disk: " + why + "; use permissive to run without it",
            {{contain::Capability::kDisk, why}}}));
        return p;
      }
    }
  }
  p.launched = Clock::now();
  p.runtime = Launch(kind, id, spec, std::move(events));
  return p;
}

void Sessions::CreateSession(CreateRequest request, std::function<void(Outcome<Created>)> done) {
  std::string id = request.id.value_or(NewSessionId());
  if (!ValidSessionId(id)) {
    return done(Failure(Kind::kInvalid, "id must match " + std::string(kSessionIdPattern), "id"));
  }
  if (request.kind != "shell" && request.kind != "python") {
    return done(Failure(Kind::kInvalid, "must be \"shell\" or \"python\"", "kind"));
  }
  if (request.kind == "python" && !options_.python) {
    return done(Failure(Kind::kInvalid,
                        "python sessions need the kernel-capable daemon (cordon-serve, next to "
                        "the cordon binary); this one runs without it",
                        "kind"));
  }
  if (auto it = preparing_.find(id); it != preparing_.end()) {
    it->second.push_back(std::move(done));  // one runtime for concurrent creates
    return;
  }
  auto found = Find(id);
  if (!found) return done(std::unexpected(found.error()));
  Session* s = *found;
  if (s) {
    if (s->closing) {
      return done(Failure(Kind::kConflict, "session " + id + " is being closed; try again", "id"));
    }
    const bool live = s->state == "starting" || s->state == "ready" || s->state == "busy";
    if (!live && s->file_operations > 0) {
      // Its runtime ended during an upload or download, which still uses
      // the workspace a new generation would sweep.
      return done(Failure(Kind::kConflict,
                          "session " + id + "'s files are being written or read; try again", "id"));
    }
    if (s->state == "starting") {
      s->create_waiters.push_back(std::move(done));  // one runtime for concurrent creates
      return;
    }
    if (s->state == "ready" || s->state == "busy") {
      if (s->kind != request.kind) {
        return done(
            Failure(Kind::kConflict, "session " + id + " is live and of kind " + s->kind, "kind"));
      }
      return done(Created{View(*s), false});
    }
    if (s->state == "quarantined") {
      Retry(*s);
      return done(Failure(Kind::kConflict,
                          "session " + id +
                              " is quarantined: the teardown of its previous runtime could not "
                              "be verified; it is retried in the background",
                          "id", s->problem));
    }
  }
  // A quarantined session still has processes: it is held against the
  // bound until its death is verified.
  if (const size_t held = quarantined();
      live() + preparing_.size() + held >= options_.max_sessions) {
    std::string message =
        "at most " + std::to_string(options_.max_sessions) + " sessions may be live at once";
    if (held > 0) message += " (" + std::to_string(held) + " of them quarantined)";
    return done(Failure(Kind::kOverCapacity, message));
  }
  // Validate before touching anything (the workspace is checked for real
  // when the shell is admitted).
  contain::Spec spec = std::move(request.spec);
  if (options_.bounds) {
    if (auto above = contain::ApplyBounds(*options_.bounds, spec)) {
      return done(Failure(Kind::kAboveCeiling, above->message, above->field));
    }
  }
  spec.workspace = options_.state_dir;
  spec.argv = {request.kind == "python" ? "/usr/bin/python3" : "/bin/bash"};
  if (auto invalid = contain::Validate(spec)) {
    return done(Failure(Kind::kInvalid, invalid->message(), invalid->field));
  }
  bool reuse = s && s->state == "lost" && !request.fresh_workspace;
  // An earlier generation's workspace left on disk (kept by its close, or
  // a lost one not reused) goes cold: removing it can take seconds (its
  // files, its image's unmount), and only a worker may spend them.
  const std::string workspace = WorkspacePath(options_.state_dir, id);
  struct stat leftover {};
  const bool has_leftover = ::lstat(workspace.c_str(), &leftover) == 0 ||
                            ::lstat((workspace + ".img").c_str(), &leftover) == 0;
  if (!reuse && !has_leftover && MatchesPool(request.kind, spec)) {
    auto warm = std::make_unique<Session>();
    warm->generation = s ? s->generation + 1 : 1;
    const int64_t ttl_ms = request.ttl_s ? *request.ttl_s * 1000 : options_.idle_ttl.count();
    if (TakeWarm(request.kind, id, warm, ttl_ms)) {
      Session& session = *warm;
      sessions_[id] = std::move(warm);
      // The pool refills on the next turn of the loop, not before this
      // answer: a refill bounds a workspace (a loop image mounted, ~30 ms)
      // and launches a runtime, which a warm hand-out must not wait for.
      tick_->Set(std::chrono::milliseconds(1), [this] { Tick(); });
      if (auto recorded = Record(session); !recorded) {
        return done(std::unexpected(Unrecorded(session, recorded.error(), false)));
      }
      if (observer_.ready) observer_.ready(std::chrono::microseconds(0));
      Log("session_ready", session, {{"warm", true}});
      return done(Created{View(session), true});
    }
  }
  // Cold: its workspace is made (and bounded: a loop image takes tens of
  // milliseconds) and its runtime launched on a worker; the loop attaches
  // it. Creates of the same id meanwhile wait for it.
  spec.workspace = workspace;
  spec.isolation.workspace_made = true;
  spec.owner = "session:" + id;
  AddAllowlist(spec, probe_, workspace, request.kind);
  const int64_t generation = s ? s->generation + 1 : 1;
  preparing_[id];
  contain::Spec to_launch = spec;  // (the arguments' order is unspecified: no move of spec there)
  Offload(
      [this, id, workspace, reuse, spec = std::move(to_launch), events = EventsOf(id, generation),
       kind = request.kind]() mutable {
        Prepared p = Prepare(id, workspace, reuse, spec, std::move(events), kind);
        // Nothing of a create that failed stays: a workspace made for it
        // goes (its loop image detached), one kept from a lost generation
        // stays. The id is still being prepared: no other create or close
        // of it runs meanwhile.
        if (!reuse && (!p.made || !*p.runtime)) (void)RemoveWorkspace(options_.state_dir, id);
        return p;
      },
      [this, id, workspace, reuse, generation, kind = request.kind, ttl_s = request.ttl_s,
       spec = std::move(spec), done = std::move(done),
       on_starting = std::move(request.on_starting)](Prepared p) mutable {
        auto waiting = std::move(preparing_[id]);
        preparing_.erase(id);
        auto answer = [&](Outcome<Created> outcome) {
          done(outcome);
          for (auto& w : waiting) w(outcome);
        };
        if (p.unbounded && observer_.log) {
          observer_.log("workspace_unbounded", {{"session_id", id}, {"error", *p.unbounded}});
        }
        if (!p.made) return answer(std::unexpected(p.made.error()));
        auto fresh = std::make_unique<Session>();
        fresh->id = id;
        fresh->kind = kind;
        fresh->generation = generation;
        fresh->spec = std::move(spec);
        fresh->ttl_ms = ttl_s ? *ttl_s * 1000 : options_.idle_ttl.count();
        fresh->summary = contain::SpecSummary(fresh->spec);
        fresh->summary.erase("argv");  // the shell's, not asked for
        fresh->summary.erase("stdin_bytes");
        fresh->summary["workspace_reused"] = reuse;
        fresh->created_at_ms = store::NowMs();
        fresh->born = fresh->last_used = Clock::now();
        fresh->starting_since = p.launched;
        Session& session = *fresh;
        // Held, if it was found: Tick lets go of no id being prepared.
        std::unique_ptr<Session> previous;
        if (auto held = sessions_.find(id); held != sessions_.end()) {
          previous = std::move(held->second);
        }
        sessions_[id] = std::move(fresh);
        if (auto failed = Started(session, Attached(std::move(*p.runtime)))) {
          // Nothing started (its runtime killed as it went): the id keeps
          // its previous state, and a workspace made for it goes, here
          // (rare: the loop was refused a descriptor).
          if (previous) {
            sessions_[id] = std::move(previous);
          } else {
            sessions_.erase(id);
          }
          if (!reuse) (void)RemoveWorkspace(options_.state_dir, id);
          return answer(std::unexpected(*failed));
        }
        if (auto recorded = Record(session); !recorded) {
          return answer(std::unexpected(Unrecorded(session, recorded.error(), reuse)));
        }
        Log("session_starting", session, {{"workspace_reused", reuse}});
        session.create_waiters.push_back(std::move(done));
        for (auto& w : waiting) session.create_waiters.push_back(std::move(w));
        if (stopping_) {
          // Launched as the daemon began to stop: it goes as the rest went.
          session.closing = true;
          session.keep_workspace = true;
          session.runtime->Kill();
        } else if (on_starting) {
          on_starting(View(session));
        }
      });
}

void Sessions::OnReady(const std::string& id, int64_t generation) {
  Session* s = Current(id, generation);
  if (!s) return;
  s->state = "ready";
  s->last_used = Clock::now();
  Record(*s);
  auto took =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - s->starting_since);
  if (observer_.ready) observer_.ready(took);
  Log("session_ready", *s, {{"ready_us", took.count()}});
  auto waiters = std::move(s->create_waiters);
  s->create_waiters.clear();
  for (size_t i = 0; i < waiters.size(); ++i) waiters[i](Created{View(*s), i == 0});
  auto restarted = std::move(s->restart_waiters);
  s->restart_waiters.clear();
  for (auto& w : restarted) w(View(*s));
  Pump(*s);
}

void Sessions::Pump(Session& s) {
  while (s.runtime && s.runtime->ready() && !s.queue.empty()) {
    Pending p = std::move(s.queue.front());
    s.queue.pop_front();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - Clock::now());
    if (left.count() <= 0) {
      AnswerNeverRan(p.done);
      continue;
    }
    ExecRequest request;
    request.command = std::move(p.call.command);
    request.timeout = left;
    request.stdin_bytes = std::move(p.call.stdin_bytes);
    request.on_output = std::move(p.call.on_output);
    request.output_limit = static_cast<size_t>(s.spec.limits.output_limit_bytes);
    request.grace = std::chrono::milliseconds(s.spec.limits.grace_ms);
    const std::string id = s.id;
    const int64_t generation = s.generation;
    const std::optional<uint64_t> oom_before = OomKills(s);
    s.runtime->Exec(std::move(request), [this, id, generation, oom_before,
                                         done = std::move(p.done)](ExecResult result) {
      // A runtime that itself was OOM-killed ended: OnEnded
      // marked the result from its release.
      if (Session* current = Current(id, generation); current && oom_before) {
        auto now = OomKills(*current);
        if (now && *now > *oom_before) result.oom_killed = true;
      }
      done(std::move(result));
      if (Session* current = Current(id, generation)) {
        current->last_used = Clock::now();
        Pump(*current);
      }
    });
  }
}

void Sessions::FailQueue(Session& s, const Error& error) {
  auto queue = std::move(s.queue);
  s.queue.clear();
  for (auto& p : queue) p.done(std::unexpected(error));
  auto waiters = std::move(s.create_waiters);
  s.create_waiters.clear();
  for (auto& w : waiters) w(std::unexpected(error));
  auto restarts = std::move(s.restart_waiters);
  s.restart_waiters.clear();
  for (auto& w : restarts) w(std::unexpected(error));
}

void Sessions::OnEnded(const std::string& id, int64_t generation, Runtime::Ended ended) {
  Session* s = Current(id, generation);
  if (!s) return;
  const contain::Release& release = ended.run.release;
  if (observer_.released) observer_.released(release);
  const bool was_starting = s->state == "starting";
  auto finish_exec = [&](bool invalidated, bool restarted) {
    if (!ended.exec_done) return;
    ended.exec->invalidated = invalidated;
    ended.exec->shell_restarted = restarted;
    ended.exec->oom_killed |= ended.run.oom_killed;
    std::function<void(ExecResult)> done = std::move(ended.exec_done);
    done(std::move(*ended.exec));
  };

  if (!release.dead) {
    finish_exec(true, false);
    // A teardown the daemon was asked for (a close, a restart) has no
    // cause to tell beyond what the runtime knows.
    Quarantine(
        *s, release,
        ended.end == Runtime::End::kKilled ? ended.why : EndedWhy(s->kind, ended, was_starting));
    return;
  }
  // The runtime is gone and verified dead: it can be destroyed (later).
  const bool restarts_on_exit = s->runtime->restarts_on_exit();
  retired_.push_back(std::move(s->runtime));
  if (s->closing) {
    finish_exec(true, false);
    Close(*s);
    return;
  }
  if (s->restarting && ended.end == Runtime::End::kKilled) {
    // Restart: a fresh process, same generation and workspace.
    s->restarting = false;
    finish_exec(true, false);
    Log("session_restarting", *s);
    Relaunch(*s, "the runtime");
    return;
  }
  s->restarting = false;
  if (restarts_on_exit && ended.end == Runtime::End::kExited && ended.exec && !was_starting) {
    // The command ended the shell (`exit 7`): a fresh one, same workspace.
    Log("shell_restarted", *s, {{"exit_code", ended.run.exit_code.value_or(-1)}});
    finish_exec(false, true);
    Relaunch(*s, "the shell");
    return;
  }
  finish_exec(true, false);
  s->state = "invalidated";
  if (!was_starting) KeepRevivable(*s);
  const std::string why = EndedWhy(s->kind, ended, was_starting);
  if (ended.end == Runtime::End::kExited && observer_.died) observer_.died(s->kind);
  s->problem = {{"message", why}};
  Record(*s);
  Log("session_invalidated", *s, {{"why", why}});
  Error error{
      was_starting ? Kind::kInternal : Kind::kConflict,
      "session " + id + " is invalidated: " + why + "; create it again for a new generation", "",
      nullptr};
  FailQueue(*s, error);
}

void Sessions::KeepRevivable(const Session& s) {
  revivable_[s.id] = {s.generation, s.spec, Clock::now() + std::chrono::milliseconds(s.ttl_ms)};
  if (revivable_.size() <= options_.max_sessions) return;
  auto oldest = std::min_element(
      revivable_.begin(), revivable_.end(),
      [](const auto& a, const auto& b) { return a.second.until < b.second.until; });
  revivable_.erase(oldest);
}

void Sessions::Quarantine(Session& s, const contain::Release& release, const std::string& why) {
  s.state = "quarantined";
  s.problem = Survivors(release, why);
  Record(s);
  Log("session_quarantined", s, {{"survivors", release.survivors}, {"problem", release.problem}});
  Error error{Kind::kConflict,
              "session " + s.id + " is quarantined: " + s.problem["message"].get<std::string>(), "",
              s.problem};
  FailQueue(s, error);
  auto waiters = std::move(s.delete_waiters);
  s.delete_waiters.clear();
  for (auto& w : waiters) w(std::unexpected(error));
  s.closing = false;
  if (stopping_) {
    shutdown_all_dead_ = false;
    MaybeFinishShutdown();
  }
}

void Sessions::Close(Session& s) {
  // One removal at a time: the one under way answers every waiter.
  if (s.removing) return;
  if (s.file_operations > 0) {
    // A file being written or read there: the last one's end closes it.
    s.closing = true;
    s.close_pending = true;
    return;
  }
  s.grant_id.clear();
  if (s.keep_workspace) return Closed(s, {});
  // The workspace goes on a worker (unmounting and deleting its image
  // blocks); the session stays `closing` until it is gone, so that
  // whoever is told it is closed finds no workspace, and nothing retries
  // or recreates it meanwhile.
  s.closing = true;
  s.removing = true;
  Offload([state_dir = options_.state_dir, id = s.id] { return RemoveWorkspace(state_dir, id); },
          [this, id = s.id, generation = s.generation](sys::Result<void> removed) {
            if (Session* s = Current(id, generation)) Closed(*s, std::move(removed));
          });
}

void Sessions::Closed(Session& s, sys::Result<void> removed) {
  s.closing = false;
  s.removing = false;
  s.state = "closed";
  if (!removed) {
    s.problem = {{"message", "the workspace could not be removed: " + removed.error().message()}};
  }
  Record(s);
  Log("session_closed", s, {{"workspace_kept", s.keep_workspace}});
  FailQueue(s, Error{Kind::kConflict, "session " + s.id + " was closed", "", nullptr});
  auto waiters = std::move(s.delete_waiters);
  s.delete_waiters.clear();
  for (auto& w : waiters) w(View(s));
  MaybeFinishShutdown();
}

// One more attempt at the teardown of a quarantined session's tree.
void Sessions::Retry(Session& s) {
  if (s.state != "quarantined" || s.retrying || s.closing) return;
  const std::string id = s.id;
  const int64_t generation = s.generation;
  auto resolved = [this, id, generation](const contain::Release& release) {
    Session* s = Current(id, generation);
    if (!s) return;
    s->retrying = false;
    if (observer_.released) observer_.released(release);
    if (!release.dead) {
      const std::string cause =
          s->problem.is_object() ? s->problem.value("cause", std::string()) : std::string();
      s->problem = Survivors(release, cause);
      if (std::exchange(s->retry_again, false)) return Retry(*s);
      MaybeFinishShutdown();  // a stop waits for the last try
      return;
    }
    if (s->runtime) retired_.push_back(std::move(s->runtime));
    s->problem = nullptr;
    Log("quarantine_resolved", *s);
    Close(*s);
  };
  s.retrying = true;
  if (s.runtime) {
    s.runtime->RetryRelease(std::move(resolved));
    return;
  }
  // Quarantined by an earlier daemon: that daemon is gone, so the grant is
  // an orphan and contain::Reap applies, with its identity checks.
  contain::ReapOptions reap;
  reap.grant_id = s.grant_id;
  reap.verify_timeout = options_.verify_timeout;
  auto reports = contain::Reap(store_, signaller_, reap);
  contain::Release release;
  if (reports && !reports->empty()) {
    release = reports->front().release;
    release.dead = reports->front().action != "survivors";
  } else if (reports) {
    release.dead = true;  // nothing active is left under that grant
  } else {
    release.problem = reports.error().message();
  }
  resolved(release);
}

std::optional<Error> Sessions::Unusable(Session& s) {
  if (s.closing) return Error{Kind::kConflict, "session " + s.id + " is being closed", "", nullptr};
  if (s.state == "quarantined") {
    Retry(s);
    if (s.state == "quarantined") {
      return Error{
          Kind::kConflict,
          "session " + s.id + " is quarantined: " + s.problem.value("message", std::string()), "",
          s.problem};
    }
  }
  if (s.state == "invalidated") {
    return Error{Kind::kConflict,
                 "session " + s.id + " is invalidated (" +
                     s.problem.value("message", std::string("its runtime was torn down")) +
                     "); create it again to start a new generation with a fresh workspace",
                 "", nullptr};
  }
  if (s.state == "lost") {
    return Error{Kind::kConflict,
                 "session " + s.id +
                     " was lost when the daemon stopped; create it again to start a new "
                     "generation in the same workspace",
                 "", nullptr};
  }
  if (s.state == "closed")
    return Error{Kind::kConflict, "session " + s.id + " is closed", "", nullptr};
  return std::nullopt;
}

Outcome<ListFilter> MakeListFilter(const std::optional<std::string>& kind,
                                   const std::vector<std::string>& states,
                                   const std::optional<std::string>& after,
                                   std::optional<int64_t> limit) {
  if (kind && *kind != "shell" && *kind != "python") {
    return Failure(Kind::kInvalid, "must be \"shell\" or \"python\", got \"" + *kind + "\"",
                   "kind");
  }
  if (after && !ValidSessionId(*after)) {
    return Failure(
        Kind::kInvalid,
        "must be a session id (" + std::string(kSessionIdPattern) + "), got \"" + *after + "\"",
        "after");
  }
  if (limit && (*limit < 1 || *limit > kMaxListLimit)) {
    return Failure(
        Kind::kInvalid,
        "must be from 1 to " + std::to_string(kMaxListLimit) + ", got " + std::to_string(*limit),
        "limit");
  }
  ListFilter filter{kind.value_or(""), {}, after.value_or(""), std::nullopt};
  if (limit) filter.limit = static_cast<size_t>(*limit);
  for (const std::string& state : states) {
    if (std::find(kSessionStates.begin(), kSessionStates.end(), state) == kSessionStates.end()) {
      return Failure(Kind::kInvalid,
                     "no state \"" + state + "\" (states: " + sys::JoinNames(kSessionStates) + ")",
                     "state");
    }
  }
  if (!states.empty()) {
    for (const std::string& state : kSessionStates) {
      if (std::find(states.begin(), states.end(), state) == states.end()) {
        filter.except.push_back(state);
      }
    }
  }
  return filter;
}

void Sessions::OnList(const ListFilter& filter, std::function<void(Listing)> shape,
                      std::function<void(std::optional<Error>)> done) {
  // What is held, as it is now; what is not held has ended, and its
  // record says what it was. There may be many of those (a week's): they
  // are read, their views made, put in order and shaped on a worker.
  // A held session is what it is now, whatever its record says (a busy
  // one's says ready): its record is never listed in its place.
  const auto& except = filter.except;
  std::map<std::string, nlohmann::json> views;
  std::set<std::string> held;
  for (auto it = sessions_.upper_bound(filter.after); it != sessions_.end(); ++it) {
    const auto& [id, s] = *it;
    held.insert(id);
    if (!filter.kind.empty() && s->kind != filter.kind) continue;
    if (!filter.closing && s->closing) continue;
    nlohmann::json view = View(*s);
    const std::string state = view["state"];  // (busy: a ready one's, running)
    if (std::find(except.begin(), except.end(), state) == except.end()) {
      views.emplace(id, std::move(view));
    }
  }
  Offload(
      [this, filter, held = std::move(held), views = std::move(views),
       shape = std::move(shape)]() mutable {
        // A page's worth: the first `limit` records not held are among
        // the first `limit` + (those held) read, and one more says
        // whether there are more.
        std::optional<size_t> rows;
        if (filter.limit) rows = *filter.limit + held.size() + 1;
        auto records = store_.ListSessions(filter.kind, filter.except, filter.after, rows);
        if (!records) return std::optional<std::string>(records.error().message());
        for (const auto& r : *records) {
          if (!held.contains(r.id)) views.emplace(r.id, View(*FromRecord(r)));
        }
        Listing page{nlohmann::json::array(), std::nullopt};
        for (auto& [id, view] : views) {
          if (filter.limit && page.sessions.size() == *filter.limit) {
            page.next = page.sessions.back()["id"].get<std::string>();
            break;
          }
          page.sessions.push_back(std::move(view));
        }
        shape(std::move(page));
        return std::optional<std::string>();
      },
      [this, done = std::move(done)](std::optional<std::string> store_error) {
        if (!store_error) return done(std::nullopt);
        if (observer_.log) observer_.log("store_error", {{"error", *store_error}});
        done(Error{Kind::kInternal, "cannot read the sessions' records: " + *store_error, "",
                   nullptr});
      });
}

Outcome<nlohmann::json> Sessions::Get(const std::string& id) {
  CORDON_ASSIGN_OR_RETURN(Session * s, Existing(id));
  Retry(*s);  // touching a quarantined id retries its teardown
  return View(*s);
}

void Sessions::Delete(const std::string& id, bool keep_workspace,
                      std::function<void(Outcome<nlohmann::json>)> done) {
  auto found = Existing(id);
  if (!found) return done(std::unexpected(found.error()));
  Session* s = *found;
  if (preparing_.contains(id)) {
    // Its next generation's workspace is being made: not now.
    return done(Failure(Kind::kConflict, "session " + id + " is being created; try again", "id"));
  }
  if (s->state == "quarantined") {
    if (auto e = Unusable(*s)) return done(std::unexpected(*e));
  }
  if (s->closing || s->relaunching ||
      (s->runtime && s->state != "quarantined" && s->state != "closed")) {
    s->delete_waiters.push_back(std::move(done));
    if (!s->closing) {
      s->closing = true;
      s->keep_workspace = keep_workspace;
      Log("session_deleting", *s);
      // A runtime being relaunched is killed once it is launched.
      if (s->runtime) s->runtime->Kill();
    }
    return;
  }
  // closed, invalidated or lost: no process is left; only the workspace.
  s->keep_workspace = keep_workspace;
  s->delete_waiters.push_back(std::move(done));
  Close(*s);
}

void Sessions::Exec(const std::string& id, ExecCall call,
                    std::function<void(Outcome<ExecResult>)> done) {
  auto found = Existing(id);
  if (!found) return done(std::unexpected(found.error()));
  Session* s = *found;
  if (auto e = Unusable(*s)) return done(std::unexpected(*e));
  if (s->kind == "python") {
    if (call.stdin_bytes) {
      return done(Failure(Kind::kInvalid, "is not available for python sessions", "stdin"));
    }
  } else if (call.command.find('\0') != std::string::npos) {
    return done(Failure(Kind::kInvalid, "contains a NUL byte", "command"));
  }
  if (call.stdin_bytes && call.stdin_bytes->find('\0') != std::string::npos) {
    return done(Failure(Kind::kInvalid, "contains a NUL byte (a shell cannot pass it)", "stdin"));
  }
  if (s->kind == "shell" &&
      call.command.size() + call.stdin_bytes.value_or("").size() > kMaxCommandBytes) {
    return done(Failure(Kind::kTooLarge,
                        "command and stdin together are over " + std::to_string(kMaxCommandBytes) +
                            " bytes; put data in the workspace with the files API",
                        "command"));
  }
  int64_t timeout_ms = call.timeout_ms.value_or(
      s->spec.limits.timeout_ms.value_or(options_.default_exec_timeout_ms));
  s->last_used = Clock::now();
  s->queue.push_back(Pending{std::move(call), Clock::now() + std::chrono::milliseconds(timeout_ms),
                             std::move(done)});
  Pump(*s);
}

Outcome<bool> Sessions::Interrupt(const std::string& id) {
  CORDON_ASSIGN_OR_RETURN(Session * s, Existing(id));
  if (auto e = Unusable(*s)) return std::unexpected(*e);
  return s->runtime && s->runtime->Interrupt();
}

void Sessions::Restart(const std::string& id, std::function<void(Outcome<nlohmann::json>)> done) {
  auto found = Existing(id);
  if (!found) return done(std::unexpected(found.error()));
  Session* s = *found;
  auto revivable = revivable_.find(id);
  if (s->state == "invalidated" && !s->closing && !s->runtime && !s->relaunching &&
      revivable != revivable_.end() && revivable->second.generation == s->generation &&
      Clock::now() < revivable->second.until) {
    // Its runtime died or was torn down (a deadline, an interrupt not
    // heeded): a fresh one in the same generation and workspace, as a
    // Jupyter server restarts a dead kernel.
    s->spec = std::move(revivable->second.spec);
    revivable_.erase(revivable);
    s->restart_waiters.push_back(std::move(done));
    Log("session_restart", *s);
    Relaunch(*s, RuntimeName(s->kind));
    return;
  }
  if (auto e = Unusable(*s)) return done(std::unexpected(*e));
  s->restart_waiters.push_back(std::move(done));
  if (s->state == "starting" || s->restarting) return;  // the next ready answers it
  s->restarting = true;
  s->state = "starting";
  Log("session_restart", *s);
  s->runtime->Kill();
}

Runtime* Sessions::RuntimeOf(const std::string& id) {
  // A session with a runtime is held: no record is read for it.
  auto it = sessions_.find(id);
  Session* s = it != sessions_.end() ? it->second.get() : nullptr;
  if (!s || s->closing || (s->state != "ready" && s->state != "busy")) return nullptr;
  return s->runtime.get();
}

void Sessions::ClientConnected(const std::string& id) {
  if (auto it = sessions_.find(id); it != sessions_.end()) {
    ++it->second->clients;
    it->second->last_used = Clock::now();
  }
}

void Sessions::ClientUsed(const std::string& id) {
  if (auto it = sessions_.find(id); it != sessions_.end()) it->second->last_used = Clock::now();
}

void Sessions::ClientLeft(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  if (s.clients > 0) --s.clients;
  s.last_used = Clock::now();
}

std::string Sessions::KindOf(const std::string& id) {
  auto s = Find(id);
  return s && *s ? (*s)->kind : "";
}

size_t Sessions::live(const std::string& kind) const {
  return static_cast<size_t>(std::count_if(sessions_.begin(), sessions_.end(), [&](const auto& e) {
    const std::string& st = e.second->state;
    return e.second->kind == kind && (st == "starting" || st == "ready" || st == "busy");
  }));
}

void Sessions::OnWorkspace(const std::string& id, std::function<void(int workspace_fd)> work,
                           std::function<void(std::optional<Error> unusable)> done) {
  auto found = Existing(id);
  if (!found) return done(found.error());
  Session* s = *found;
  if (auto e = Unusable(*s)) return done(*e);
  s->last_used = Clock::now();
  auto fd = sys::Open(WorkspacePath(options_.state_dir, id), O_PATH | O_DIRECTORY);
  if (!fd) {
    return done(
        Error{Kind::kInternal, "cannot open the workspace: " + fd.error().message(), "", nullptr});
  }
  ++s->file_operations;
  Offload([fd = std::make_shared<sys::UniqueFd>(std::move(*fd)),
           work = std::move(work)] { work(fd->get()); },
          [this, id, generation = s->generation, done = std::move(done)] {
            // Answered first: a close it held is answered after it.
            done(std::nullopt);
            Session* s = Current(id, generation);
            if (s && --s->file_operations == 0 && s->close_pending) {
              s->close_pending = false;
              Close(*s);
            }
          });
}

// The housekeeping timer: never called from inside a Runtime's callbacks, so
// this is where retired Runtimes are destroyed.
void Sessions::Tick() {
  retired_.clear();
  const auto now = Clock::now();
  std::erase_if(revivable_, [&](const auto& e) { return e.second.until <= now; });
  std::vector<Session*> cull;
  // An ended session is let go once it has settled and its record says
  // so: what ended is kept on record, not in the daemon's memory. A record
  // the store refused is written again first, but not while the store
  // keeps refusing: one is tried, then none for a while (backing off to a
  // minute), so a full disk logs a store_error now and then, not one a
  // second for each session.
  bool refusing = rerecord_.waiting();
  std::erase_if(sessions_, [&](const auto& e) {
    Session& s = *e.second;
    if (!refusing && !s.recorded && (s.state == "closed" || s.state == "invalidated")) {
      if (Record(s)) {
        rerecord_.Succeeded();
      } else {
        rerecord_.Failed();
        refusing = true;
      }
    }
    return Settled(s);
  });
  // An exec whose deadline passed while it waited its turn is answered
  // now (it never ran), not when the one before it ends.
  std::vector<Pending> expired;
  for (auto& [id, s] : sessions_) {
    std::erase_if(s->queue, [&](Pending& p) {
      if (p.deadline > now) return false;
      expired.push_back(std::move(p));
      return true;
    });
  }
  for (Pending& p : expired) AnswerNeverRan(p.done);
  for (auto& [id, s] : sessions_) {
    if (s->state == "quarantined") Retry(*s);
    if (s->closing || !s->runtime || s->state != "ready") continue;
    bool idle = !s->runtime->busy() && s->queue.empty() && s->clients == 0 &&
                now - s->last_used > std::chrono::milliseconds(s->ttl_ms);
    bool old = now - s->born > options_.max_lifetime;
    if (idle || old) {
      Log("session_culled", *s, {{"why", idle ? "idle TTL" : "maximum lifetime"}});
      cull.push_back(s.get());
    }
  }
  for (Session* s : cull) {
    s->closing = true;
    s->keep_workspace = false;
    s->runtime->Kill();
  }
  FillPool();
  tick_->Set(options_.tick, [this] { Tick(); });
}

size_t Sessions::PoolTarget(const std::string& kind) const {
  // A warm runtime must see its workspace at /workspace, whatever the
  // directory is renamed to at hand-out: without namespaces (Landlock
  // alone) its HOME and working directory are the host path of the pool's.
  if (!probe_.isolation.namespaces.available) return 0;
  if (kind == "python") return options_.python ? options_.prespawn : 0;
  return options_.prespawn_shells;
}

bool Sessions::MatchesPool(const std::string& kind, const contain::Spec& spec) const {
  if (PoolTarget(kind) == 0) return false;
  // The pool's runtimes were started with the defaults and the bounds.
  contain::Spec defaults;
  if (options_.bounds) (void)contain::ApplyBounds(*options_.bounds, defaults);
  bool default_limits = contain::LimitsJson(spec.limits) == contain::LimitsJson(defaults.limits) &&
                        spec.defaulted == defaults.defaulted;
  return spec.env.empty() && default_limits && spec.required.empty() && !spec.permissive &&
         spec.isolation.level == defaults.isolation.level &&
         spec.isolation.network == defaults.isolation.network && spec.isolation.binds.empty() &&
         defaults.isolation.enabled();
}

size_t Sessions::warm(const std::string& kind) const {
  return static_cast<size_t>(std::count_if(pool_.begin(), pool_.end(), [&](const auto& e) {
    return e.second.kind == kind && e.second.ready;
  }));
}

// Starts pool runtimes until there are as many of each kind (ready or
// starting) as asked for, shells first (they are ready in milliseconds).
void Sessions::FillPool() {
  if (stopping_ || !contain::Spec().isolation.enabled()) return;
  for (const std::string kind : {"shell", "python"}) {
    const size_t target = PoolTarget(kind);
    if (pool_backoff_[kind].waiting()) continue;
    auto have = [&] {
      return static_cast<size_t>(std::count_if(
          pool_.begin(), pool_.end(), [&](const auto& e) { return e.second.kind == kind; }));
    };
    while (have() + pool_preparing_[kind] < target) StartWarm(kind);
  }
}

// Each pool runtime gets a workspace of its own (named so that no session
// id can collide with it), renamed to the session's when it is handed out:
// a sandbox sees it at /workspace either way. The workspace is made (and
// bounded: a loop image takes tens of milliseconds) and the runtime
// launched on a worker; the loop attaches it.
void Sessions::StartWarm(const std::string& kind) {
  struct Made {
    sys::Result<void> made;
    std::optional<std::string> unbounded;  // why its disk bound failed
    std::optional<MadeRuntime> runtime;    // launched once its workspace is made
  };
  const std::string key = ".warm-" + sys::RandomHex(6);
  const std::string workspace = options_.state_dir + "/workspaces/" + key;
  contain::Spec spec;
  if (options_.bounds) (void)contain::ApplyBounds(*options_.bounds, spec);
  spec.workspace = workspace;
  spec.isolation.workspace_made = true;
  spec.owner = "session-pool";
  spec.argv = {kind == "python" ? "/usr/bin/python3" : "/bin/bash"};
  AddAllowlist(spec, probe_, workspace, kind);
  auto binding = std::make_shared<Binding>(Binding{key, 0, true});
  ++pool_preparing_[kind];
  contain::Spec to_launch = spec;  // (the arguments' order is unspecified: no move of spec there)
  Offload(
      [this, kind, key, workspace, spec = std::move(to_launch),
       events = PoolEventsOf(binding)]() mutable {
        Made m;
        const std::string parent = std::filesystem::path(workspace).parent_path().string();
        if (::mkdir(parent.c_str(), probe_.SandboxesRunAsOwnUids() ? 0711 : 0700) != 0 &&
            errno != EEXIST) {
          m.made = sys::FailErrno("mkdir(\"" + parent + "\")");
          return m;
        }
        if (::mkdir(workspace.c_str(), 0700) != 0) {
          m.made = sys::FailErrno("mkdir(\"" + workspace + "\")");
          return m;
        }
        const contain::DiskLimits disk{spec.limits.disk_bytes, spec.limits.disk_inodes};
        if (disk.any()) {
          // The defaults are never refused: unbounded, the pool's runtimes
          // report disk degraded, as a cold session would. Without room
          // for the bound there is no warm runtime (tried again later).
          auto bound = contain::BoundWorkspace(probe_.disk, workspace,
                                               contain::WorkspaceKind::kPersistent, disk);
          if (!bound && contain::NoRoom(bound.error())) {
            m.made = std::unexpected(bound.error().Context("cannot bound the workspace"));
            return m;
          }
          if (!bound) m.unbounded = bound.error().message();
        }
        m.runtime = Launch(kind, key, spec, std::move(events));
        return m;
      },
      [this, kind, key, workspace, binding, spec = std::move(spec)](Made m) mutable {
        --pool_preparing_[kind];
        if (m.unbounded && observer_.log) {
          observer_.log("workspace_unbounded", {{"pool_id", key}, {"error", *m.unbounded}});
        }
        MadeRuntime runtime =
            m.runtime
                ? Attached(std::move(*m.runtime))
                : std::unexpected(contain::AdmitError{
                      contain::AdmitError::Kind::kInternal, "", m.made.error().message(), {}});
        if (!runtime) {
          if (observer_.log) {
            observer_.log("pool_start_failed",
                          {{"kind", kind}, {"error", runtime.error().message}});
          }
          PoolFailed(kind);  // tried again after the backoff
          if (m.made) RemoveElsewhere(workspace);
          return;
        }
        Warm w;
        w.kind = kind;
        w.runtime = std::move(*runtime);
        w.binding = binding;
        w.spec = std::move(spec);
        w.workspace = workspace;
        w.started = Clock::now();
        Runtime* started = w.runtime.get();
        pool_.emplace(key, std::move(w));
        if (stopping_) started->Kill();  // it goes as the rest of the pool went
      });
}

Runtime::Events Sessions::PoolEventsOf(const std::shared_ptr<Binding>& binding) {
  Runtime::Events events;
  events.ready = [this, binding] {
    if (!binding->pooled) return OnReady(binding->id, binding->generation);
    auto it = pool_.find(binding->id);
    if (it == pool_.end()) return;
    it->second.ready = true;
    pool_backoff_.erase(it->second.kind);
    if (observer_.log) {
      observer_.log("pool_ready",
                    {{"pool_id", binding->id},
                     {"kind", it->second.kind},
                     {"ready_us", std::chrono::duration_cast<std::chrono::microseconds>(
                                      Clock::now() - it->second.started)
                                      .count()}});
    }
  };
  events.ended = [this, binding](Runtime::Ended ended) {
    if (!binding->pooled) return OnEnded(binding->id, binding->generation, std::move(ended));
    auto it = pool_.find(binding->id);
    if (it == pool_.end()) return;
    if (observer_.released) observer_.released(ended.run.release);
    if (observer_.log) {
      // A pool runtime whose teardown was not verified keeps its grant
      // active: the next daemon's recovery reaps it.
      observer_.log(ended.run.release.dead ? "pool_runtime_ended" : "pool_runtime_survivors",
                    {{"pool_id", binding->id},
                     {"kind", it->second.kind},
                     {"why", ended.why},
                     {"survivors", ended.run.release.survivors}});
    }
    if (!it->second.ready && !stopping_) PoolFailed(it->second.kind);
    RemoveElsewhere(it->second.workspace);
    retired_.push_back(std::move(it->second.runtime));
    pool_.erase(it);
    MaybeFinishShutdown();
  };
  return events;
}

void Sessions::RemoveElsewhere(std::string workspace) {
  Offload([workspace] { return contain::RemoveBoundWorkspace(workspace); },
          [this, workspace](sys::Result<void> removed) {
            if (!removed && observer_.log) {
              observer_.log("workspace_not_removed",
                            {{"workspace", workspace}, {"error", removed.error().message()}});
            }
          });
}

void Sessions::PoolFailed(const std::string& kind) {
  // One wait for the failures of one fill (its runtimes fail one by one).
  if (pool_backoff_[kind].waiting()) return;
  const auto delay = pool_backoff_[kind].Failed();
  if (observer_.log)
    observer_.log("pool_backoff", {{"kind", kind}, {"retry_in_ms", delay.count()}});
}

bool Sessions::TakeWarm(const std::string& kind, const std::string& id,
                        std::unique_ptr<Session>& session, int64_t ttl_ms) {
  auto it = std::find_if(pool_.begin(), pool_.end(), [&](const auto& e) {
    return e.second.kind == kind && e.second.ready && e.second.runtime && e.second.runtime->ready();
  });
  if (it == pool_.end()) return false;
  // The id has no workspace on disk (CreateSession sends one with a
  // leftover cold): the pool's takes its place.
  const std::string workspace = WorkspacePath(options_.state_dir, id);
  if (!contain::MoveBoundWorkspace(it->second.workspace, workspace)) return false;
  Warm w = std::move(it->second);
  pool_.erase(it);
  Session& s = *session;
  s.id = id;
  s.kind = kind;
  s.spec = std::move(w.spec);
  s.spec.workspace = workspace;
  s.spec.owner = "session:" + id;
  s.ttl_ms = ttl_ms;
  s.summary = contain::SpecSummary(s.spec);
  s.summary.erase("argv");
  s.summary.erase("stdin_bytes");
  s.summary["workspace_reused"] = false;
  s.summary["warm"] = true;
  s.runtime = std::move(w.runtime);
  s.grant_id = s.runtime->grant_id();
  s.runtime->Rebind(id);
  // Recorded as the session's from now on: `session-pool` names only the
  // grants of runtimes still in the pool.
  if (auto owned = store_.SetGrantOwner(s.grant_id, s.spec.owner); !owned && observer_.log) {
    observer_.log(
        "grant_owner_not_recorded",
        {{"session_id", id}, {"grant_id", s.grant_id}, {"error", owned.error().message()}});
  }
  s.state = "ready";
  s.created_at_ms = store::NowMs();
  s.born = s.last_used = s.starting_since = Clock::now();
  // From here on the runtime's events are the session's.
  w.binding->id = id;
  w.binding->generation = s.generation;
  w.binding->pooled = false;
  return true;
}

void Sessions::Shutdown(std::function<void(bool)> done) {
  stopping_ = true;
  tick_->Cancel();
  // Every live session is marked before anything is killed, the pool's
  // runtimes included, and nothing can end the shutdown until all of it
  // has begun (`shutdown_` is set last): a teardown may end at once.
  // (Killing the pool first let its last teardown finish the shutdown while
  // sessions were still live, their bound workspaces still mounted.)
  std::vector<Runtime*> kill;
  for (auto& [key, w] : pool_) kill.push_back(w.runtime.get());
  for (auto& [id, s] : sessions_) {
    if (!s->runtime || s->closing || s->state == "quarantined" || s->state == "closed") continue;
    s->closing = true;
    s->keep_workspace = true;
    kill.push_back(s->runtime.get());
  }
  for (Runtime* runtime : kill) runtime->Kill();
  // A quarantined session gets one more try at its teardown: what kept its
  // processes alive may be gone since the last retry, and the stop then
  // leaves it closed. One that still fails stays quarantined, and the stop
  // says that not all are dead.
  for (auto& [id, s] : sessions_) {
    if (s->retrying) {
      s->retry_again = true;  // that one may have begun before the cause went
    } else {
      Retry(*s);
    }
  }
  shutdown_ = std::move(done);
  MaybeFinishShutdown();
}

void Sessions::MaybeFinishShutdown() {
  if (!stopping_ || !shutdown_) return;
  if (!pool_.empty() || offload_.pending() > 0) return;
  for (const auto& [id, s] : sessions_) {
    if (s->closing || s->retrying || (s->runtime && s->state == "starting")) return;
  }
  ReleaseIdleWorkspaces(options_.state_dir, sessions_);
  auto done = std::move(shutdown_);
  shutdown_ = nullptr;
  done(shutdown_all_dead_ && quarantined() == 0);
}

}  // namespace cordon::session
