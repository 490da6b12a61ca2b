#include "api/daemon.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "api/file_routes.h"
#include "api/log.h"
#include "api/requests.h"
#include "api/runs.h"
#include "api/url.h"
#include "contain/probe.h"
#include "contain/reap.h"
#include "mcp/http_transport.h"
#include "mcp/server.h"
#include "store/store.h"
#include "sys/json_text.h"
#include "sys/random.h"
#include "sys/text.h"

#ifndef CORDON_VERSION
#define CORDON_VERSION "dev"
#endif

namespace cordon::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The query parameters a /v1 route takes, by its segments and method.
std::vector<std::string_view> QueryKeys(const std::vector<std::string>& seg, http::verb method) {
  if (seg.size() == 3 && seg[1] == "sessions" && method == http::verb::delete_) {
    return {"keep_workspace"};
  }
  if (seg.size() == 2 && seg[1] == "sessions" && method == http::verb::get) {
    return {"kind", "state", "after", "limit"};
  }
  if (seg.size() == 4 && seg[1] == "sessions" && seg[3] == "files") return {"dir"};
  if (seg.size() > 4 && seg[1] == "sessions" && seg[3] == "files" && method == http::verb::put) {
    return {"offset"};
  }
  return {};
}

// Removes what runs of an earlier daemon left in <state>/scratch: each
// workspace with its bound (a tmpfs unmounted, an image deleted).
void SweepScratch(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> workspaces, images;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string path = entry.path().string();
    (path.ends_with(".img") ? images : workspaces).push_back(std::move(path));
  }
  for (const auto& path : workspaces) {
    if (auto removed = contain::RemoveBoundWorkspace(path); !removed) {
      Log("error", "scratch_not_removed",
          {{"workspace", path}, {"error", removed.error().message()}});
    }
  }
  // Images whose workspace directory was already gone.
  for (const auto& path : images) std::filesystem::remove(path, ec);
}

// The first directory above `dir` that does not let other users through
// (no o+x), or "" when every one does: a sandbox that runs as a uid of its
// own without a mount namespace reaches its workspace by host path.
std::string FirstClosedAncestor(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::weakly_canonical(dir, ec);
  if (ec) return "";
  while (path.has_relative_path()) {
    path = path.parent_path();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) return path.string();
  }
  return "";
}

// One daemon (cordon serve or cordon mcp) per state directory: a second
// would take the first's live sessions for a crashed daemon's, record them
// lost and sweep their workspaces. An flock on <state>/daemon.lock, held
// while the daemon lives (the kernel drops it whichever way it ends), names
// the holder's pid.
sys::Result<sys::UniqueFd> LockStateDir(const std::string& state_dir) {
  const std::string path = state_dir + "/daemon.lock";
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd lock,
                          sys::Open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return sys::FailErrno("flock(\"" + path + "\")");
    auto holder = sys::ReadAll(lock.get(), 32);
    std::string pid = holder ? holder->substr(0, holder->find('\n')) : "";
    return sys::Fail("another cordon serve or cordon mcp" +
                         (pid.empty() ? "" : " (pid " + pid + ")") + " uses the state directory " +
                         state_dir + "; give this one a --state-dir of its own",
                     EBUSY);
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock.get(), 0) != 0 || ::pwrite(lock.get(), pid.data(), pid.size(), 0) < 0) {
    return sys::FailErrno("write(\"" + path + "\")");
  }
  return lock;
}

}  // namespace

struct Daemon::Impl {
  asio::io_context& io;
  DaemonOptions options;
  sys::UniqueFd state_lock;  // LockStateDir
  std::optional<store::Store> store;
  contain::Probe probe;
  contain::KernelSignaller kernel;
  contain::Signaller* signaller = nullptr;
  std::unique_ptr<AsioReactor> reactor;
  // Before the sessions: their kernels use its ZeroMQ context, which must
  // outlive them.
  std::unique_ptr<Extension> extension;
  std::unique_ptr<session::Sessions> sessions;
  std::unique_ptr<HttpServer> server;
  std::string token;
  std::string token_path;
  std::vector<std::string> urls;
  Metrics metrics;
  std::unique_ptr<Runs> runs;
  // MCP over the runs and sessions above (so declared after them).
  std::unique_ptr<mcp::Server> mcp;
  std::unique_ptr<mcp::HttpTransport> mcp_http;
  bool stopping = false;
  // Retention (--keep-records): the next pass, and what this one forgot.
  asio::steady_timer prune_timer{io};
  int64_t pruned_grants = 0;
  size_t pruned_sessions = 0;

  Impl(asio::io_context& io, DaemonOptions options) : io(io), options(std::move(options)) {}

  // --- Retention. ---
  static constexpr int64_t kPruneBatch = 1000;

  // The oldest end a record may have and be kept.
  int64_t KeepSince() const { return store::NowMs() - options.keep_records.count(); }

  // One batch of each kind per turn of the loop, so that a backlog (after
  // an upgrade, or a lowered --keep-records) does not hold up requests;
  // the pass goes on at once while a batch comes back full.
  void PruneBatch() {
    const int64_t before = KeepSince();
    auto grants = store->PruneGrants(before, kPruneBatch);
    auto forgotten = sessions->Forget(before, kPruneBatch);
    auto failed = [](const sys::Error& e) {
      Log("error", "store_error", {{"during", "pruning records"}, {"error", e.message()}});
    };
    if (grants)
      pruned_grants += *grants;
    else
      failed(grants.error());
    if (forgotten)
      pruned_sessions += *forgotten;
    else
      failed(forgotten.error());
    const bool more = (grants && *grants == kPruneBatch) ||
                      (forgotten && static_cast<int64_t>(*forgotten) == kPruneBatch);
    if (!more && (pruned_grants || pruned_sessions)) {
      Log("info", "records_pruned",
          {{"grants", pruned_grants},
           {"sessions", pruned_sessions},
           {"ended_before_ms", before},
           {"keep_records_ms", options.keep_records.count()}});
      pruned_grants = 0;
      pruned_sessions = 0;
    }
    SchedulePrune(more ? std::chrono::milliseconds(0) : PruneInterval());
  }

  std::chrono::milliseconds PruneInterval() const {
    using std::chrono::milliseconds;
    return std::clamp(options.keep_records / 10, milliseconds(1000), milliseconds(600'000));
  }

  void SchedulePrune(std::chrono::milliseconds after) {
    if (stopping) return;
    prune_timer.expires_after(after);
    prune_timer.async_wait([this](boost::system::error_code ec) {
      // Cancelled (shutdown, or the daemon destroyed): `this` may be gone.
      if (ec || stopping) return;
      PruneBatch();
    });
  }

  // --- Admission of a request, after its header. ---
  std::optional<ApiError> Admit(const Header& header, uint64_t& body_limit) {
    std::string target(header.target());
    std::string path = target.substr(0, target.find('?'));
    if (header.method() == http::verb::put && path.starts_with("/v1/sessions/") &&
        path.find("/files/") != std::string::npos) {
      // An upload's body is the file (or a chunk of it), not JSON.
      body_limit = options.max_file_bytes;
    }
    if (path == "/v1/health") return std::nullopt;
    if (path == mcp::kPath) {
      if (auto refused = mcp::CheckOrigin(header)) return refused;
    }
    const bool jupyter = extension && extension->Owns(path);
    if (!Authorized(header, jupyter ? target : "")) {
      ApiError e{401, "unauthorized", "a valid token is required: Authorization: Bearer <token>",
                 "", nullptr};
      if (jupyter) {
        e.message =
            "a valid token is required: Authorization: token <token> (or Bearer), or ?token=";
        e.style = ApiError::Style::kJupyter;
      }
      return e;
    }
    return std::nullopt;
  }

  // The header's token, or (for the Kernel Gateway surface, whose clients
  // put it there) the `token` query parameter of `target`.
  bool Authorized(const Header& header, const std::string& target) const {
    const std::string value(header[http::field::authorization]);
    std::string given;
    for (std::string_view scheme : {"Bearer ", "bearer ", "token ", "Token "}) {
      if (value.starts_with(scheme)) given = value.substr(scheme.size());
    }
    if (given.empty() && !target.empty() && target.find('?') != std::string::npos) {
      given = ParseQuery(target.substr(target.find('?') + 1))["token"];
    }
    // Constant time: how much of a wrong token matched is not revealed.
    return !given.empty() && given.size() == token.size() &&
           CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
  }

  void Answered(const Request& request, int status) {
    ++metrics.requests_by_status[status];
    Log(status >= 500 ? "error" : "info", "request",
        {{"request_id", request.id},
         {"method", std::string(request.message.method_string())},
         {"path", request.path},
         {"status", status},
         {"ms",
          std::chrono::duration<double, std::milli>(Clock::now() - request.received).count()}});
  }

  // --- Routing. ---
  void Handle(Request request, std::shared_ptr<Exchange> ex) {
    const http::verb method = request.message.method();
    const std::vector<std::string> seg = Segments(request.path);
    auto is = [&](std::initializer_list<const char*> want) { return SegmentsMatch(seg, want); };
    auto not_allowed = [&](const char* allow) {
      ex->RespondJson(
          405,
          ToJson(ApiError{405, "method_not_allowed",
                          std::string(request.message.method_string()) + " is not " +
                              "allowed on " + request.path + " (allowed: " + allow + ")",
                          "", nullptr}),
          {{"Allow", allow}});
    };
    // Read-only endpoints answer HEAD as GET, without the body (a load
    // balancer's health check).
    const bool get_or_head = method == http::verb::get || method == http::verb::head;
    if (request.path == mcp::kPath) return mcp_http->Handle(request, ex);
    if (extension && extension->Handle(request, ex)) return;
    const auto query = ParseQuery(request.query);
    if (!seg.empty() && seg[0] == "v1") {
      std::vector<std::string_view> known = QueryKeys(seg, method);
      if (auto twice = RepeatedQueryKey(request.query)) {
        return ex->RespondError(Invalid(*twice, *twice + ": given more than once"));
      }
      if (auto unknown = UnknownQueryKey(query, known)) {
        return ex->RespondError(Invalid(
            *unknown,
            *unknown + ": unknown query parameter (" +
                (known.empty() ? "this endpoint takes none" : "known: " + sys::JoinNames(known)) +
                ")"));
      }
    }
    if (is({"v1", "health"})) {
      if (!get_or_head) return not_allowed("GET, HEAD");
      // Degraded while the store's writes fail: nothing can be recorded,
      // so nothing new can start.
      auto failing = store->failing_writes();
      json writes = {{"writes", "ok"}};
      if (failing) {
        writes = {
            {"writes", "failing"}, {"error", failing->error}, {"since_ms", failing->since_ms}};
      }
      // What the state directory's filesystem has, and what the sparse
      // workspace images (sessions', runs') may still take of it.
      json room;
      if (auto r = contain::ObserveStateRoom(options.state_dir, {options.state_dir + "/workspaces",
                                                                 options.state_dir + "/scratch"})) {
        room = {{"size_bytes", r->size_bytes},
                {"free_bytes", r->free_bytes},
                {"images_unwritten_bytes", r->images_unwritten_bytes}};
      }
      return ex->RespondJson(200, {{"status", stopping  ? "stopping"
                                              : failing ? "degraded"
                                                        : "ok"},
                                   {"store", std::move(writes)},
                                   {"state_filesystem", std::move(room)},
                                   {"version", CORDON_VERSION},
                                   {"runs_active", runs->active()},
                                   {"runs_unreleased", runs->unreleased()},
                                   {"sessions_active", sessions->live()},
                                   {"sessions_quarantined", sessions->quarantined()},
                                   {"sessions_held", sessions->held()},
                                   {"kernels_warm", sessions->warm("python")},
                                   {"shells_warm", sessions->warm("shell")},
                                   {"runs_warm", runs->warm()}});
    }
    if (is({"v1", "probe"})) {
      if (!get_or_head) return not_allowed("GET, HEAD");
      return ex->RespondJson(200, contain::ToJson(probe));
    }
    if (is({"metrics"})) {
      if (!get_or_head) return not_allowed("GET, HEAD");
      return ex->Respond(200,
                         metrics.Render(runs->active(), runs->unreleased(), sessions->live(),
                                        sessions->quarantined()),
                         "text/plain; version=0.0.4");
    }
    if (is({"v1", "runs"})) {
      if (method != http::verb::post) return not_allowed("POST");
      return runs->Start(request, ex);
    }
    if (is({"v1", "sessions"})) {
      if (method == http::verb::post) return CreateSession(request, ex);
      if (method == http::verb::get) {
        // ?kind=shell&state=ready,busy&after=ID&limit=N: the states a
        // comma-separated list; a page of at most N (default and most
        // session::kMaxListLimit), with "next" to pass as `after` when
        // there are more.
        auto given = [&](const char* key) -> std::optional<std::string> {
          auto it = query.find(key);
          return it == query.end() ? std::nullopt : std::optional(it->second);
        };
        std::vector<std::string> states;
        if (auto list = given("state")) {
          for (std::string_view state : sys::SplitCommas(*list)) {
            states.emplace_back(state);  // "" too: refused
          }
        }
        int64_t limit = session::kMaxListLimit;
        if (auto text = given("limit")) {
          auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), limit);
          if (ec != std::errc() || end != text->data() + text->size()) {
            return ex->RespondError(Invalid("limit", "limit: must be a whole number from 1 to " +
                                                         std::to_string(session::kMaxListLimit) +
                                                         ", got \"" + *text + "\""));
          }
        }
        auto filter = session::MakeListFilter(given("kind"), states, given("after"), limit);
        if (!filter) return ex->RespondError(FromSession(filter.error()));
        return sessions->List<std::string>(
            *filter,
            [](session::Listing page) {
              json body = {{"sessions", std::move(page.sessions)}};
              if (page.next) body["next"] = *page.next;
              return sys::JsonText(body) + "\n";
            },
            [ex](session::Outcome<std::string> body) {
              if (!body) return ex->RespondError(FromSession(body.error()));
              ex->Respond(200, std::move(*body), "application/json");
            });
      }
      return not_allowed("GET, POST");
    }
    if (seg.size() >= 3 && seg[0] == "v1" && seg[1] == "sessions") {
      const std::string id = PercentDecode(seg[2]);
      if (seg.size() == 3) {
        if (method == http::verb::get) return Reply(ex, sessions->Get(id));
        if (method == http::verb::delete_) {
          auto flag = query.find("keep_workspace");
          std::optional<bool> keep = flag == query.end() ? false : ParseQueryFlag(flag->second);
          if (!keep) {
            const std::string message = "keep_workspace: must be true or false, got \"";
            return ex->RespondError(Invalid("keep_workspace", message + flag->second + "\""));
          }
          return sessions->Delete(id, *keep,
                                  [this, ex](session::Outcome<json> r) { Reply(ex, r); });
        }
        return not_allowed("GET, DELETE");
      }
      if (is({"v1", "sessions", "*", "exec"})) {
        if (method != http::verb::post) return not_allowed("POST");
        return Exec(id, request, ex);
      }
      if (is({"v1", "sessions", "*", "interrupt"})) {
        if (method != http::verb::post) return not_allowed("POST");
        auto interrupted = sessions->Interrupt(id);
        if (!interrupted) return ex->RespondError(FromSession(interrupted.error()));
        return ex->RespondJson(200, {{"interrupted", *interrupted}});
      }
      if (seg[3] == "files") {
        return ServeFiles(*sessions, options.max_file_bytes, seg, request, ex);
      }
    }
    ex->RespondError(ApiError{404, "not_found", "no such endpoint: " + request.path, "", nullptr});
  }

  void Reply(const std::shared_ptr<Exchange>& ex, const session::Outcome<json>& r) {
    if (!r) return ex->RespondError(FromSession(r.error()));
    ex->RespondJson(200, *r);
  }

  // --- Sessions. ---
  void CreateSession(const Request& request, const std::shared_ptr<Exchange>& ex) {
    auto body = ParseObject(request.message.body().empty() ? "{}" : request.message.body());
    if (!body) return ex->RespondError(body.error());
    auto create = ParseSession(*body);
    if (!create) return ex->RespondError(create.error());
    if (stopping) {
      return ex->RespondError(
          ApiError{503, "stopping", "the daemon is shutting down", "", nullptr});
    }
    sessions->CreateSession(std::move(*create),
                            [ex](session::Outcome<session::Sessions::Created> r) {
                              if (!r) return ex->RespondError(FromSession(r.error()));
                              ex->RespondJson(r->created ? 201 : 200, r->session);
                            });
  }

  void Exec(const std::string& id, const Request& request, const std::shared_ptr<Exchange>& ex) {
    auto body = ParseObject(request.message.body());
    if (!body) return ex->RespondError(body.error());
    auto call = ParseExec(*body);
    if (!call) return ex->RespondError(call.error());
    sessions->Exec(id, std::move(*call), [this, ex](session::Outcome<session::ExecResult> r) {
      if (!r) return ex->RespondError(FromSession(r.error()));
      ++metrics.session_execs;
      metrics.bytes_captured += r->out.data.size() + r->err.data.size();
      metrics.exec_seconds.Observe(static_cast<double>(r->duration_ms) / 1000);
      // The output is moved into the JSON, whose text, written once into a
      // buffer of its own, is the only other copy: a flooding execution
      // costs the daemon about twice its cap, as a run does (issue 11).
      size_t output_bytes = r->out.data.size() + r->err.data.size();
      if (r->kernel) output_bytes += r->kernel->bytes;
      std::string text = sys::JsonLine(session::ToJson(std::move(*r)), output_bytes);
      ex->Respond(200, std::move(text), "application/json");
    });
  }

  void WriteServeFile() {
    json info = {{"urls", urls}, {"token_file", token_path}, {"pid", ::getpid()}};
    std::string path = options.state_dir + "/serve.json";
    std::string temp = path + ".tmp";
    if (auto fd = sys::Open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0600)) {
      (void)sys::WriteAll(fd->get(), sys::JsonText(info) + "\n");
      ::rename(temp.c_str(), path.c_str());
    }
  }
};

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Daemon::~Daemon() {
  if (impl_->server) impl_->server->StopAccepting();
  // A daemon that listens nowhere (`cordon mcp`) wrote none.
  if (!impl_->urls.empty()) ::unlink((impl_->options.state_dir + "/serve.json").c_str());
}

const std::vector<std::string>& Daemon::urls() const { return impl_->urls; }
const std::string& Daemon::token_path() const { return impl_->token_path; }
mcp::Server& Daemon::mcp() { return *impl_->mcp; }

sys::Result<std::string> LoadOrCreateToken(const std::string& path, bool create) {
  auto existing = sys::ReadFile(path, 4096);
  if (existing) {
    std::string token = existing->substr(0, existing->find('\n'));
    while (!token.empty() &&
           (token.back() == ' ' || token.back() == '\r' || token.back() == '\t')) {
      token.pop_back();
    }
    if (token.empty()) return sys::Fail("the token file " + path + " is empty", EINVAL);
    return token;
  }
  if (!create || existing.error().errno_value() != ENOENT) {
    return std::unexpected(existing.error().Context("token file"));
  }
  std::string token = sys::RandomHex(32);
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(path, O_WRONLY | O_CREAT | O_EXCL, 0600));
  CORDON_RETURN_IF_ERROR(sys::WriteAll(fd.get(), token + "\n"));
  return token;
}

sys::Result<ListenAddress> ParseListen(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return sys::Fail("--listen: \"" + text + "\" is not HOST:PORT or unix:/path", EINVAL);
  }
  ListenAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  if (a.host == "localhost") a.host = "127.0.0.1";
  const std::string port = text.substr(colon + 1);
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    return sys::Fail("--listen: \"" + port + "\" is not a port number", EINVAL);
  }
  a.port = static_cast<uint16_t>(value);
  return a;
}

sys::Result<std::unique_ptr<Daemon>> Daemon::Start(asio::io_context& io, DaemonOptions options) {
  // A client or a shell that goes away must not kill the daemon with
  // SIGPIPE mid-teardown: writes fail with EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>(io, std::move(options));
  Impl& d = *impl;
  d.signaller = d.options.signaller ? d.options.signaller : &d.kernel;

  // Check every address before anything else happens.
  std::vector<std::pair<std::string, ListenAddress>> addresses;
  for (const auto& l : d.options.listen) {
    if (l.starts_with("unix:")) {
      addresses.push_back({l.substr(5), {}});
      continue;
    }
    CORDON_ASSIGN_OR_RETURN(ListenAddress a, ParseListen(l));
    boost::system::error_code ec;
    auto address = asio::ip::make_address(a.host, ec);
    if (ec) return sys::Fail("--listen: \"" + a.host + "\" is not an IP address", EINVAL);
    if (!address.is_loopback() && !d.options.allow_remote) {
      return sys::Fail("--listen " + l +
                           ": not a loopback address; listening where other machines can reach "
                           "the daemon needs --allow-remote",
                       EPERM);
    }
    addresses.push_back({"", a});
  }

  CORDON_ASSIGN_OR_RETURN(store::Store store, store::Store::Open(d.options.state_dir));
  CORDON_ASSIGN_OR_RETURN(d.state_lock, LockStateDir(d.options.state_dir));
  d.store.emplace(std::move(store));
  // The WAL's checkpoints, with their fsyncs, off the event loop. Without
  // the thread, the commit that fills the WAL checkpoints, as the CLI's do.
  if (auto aside = d.store->CheckpointInBackground(); !aside) {
    Log("warning", "checkpoint_thread_not_started", {{"error", aside.error().message()}});
  }
  contain::ProbeOptions probe_options;
  probe_options.cgroups.cgroup_root = d.options.cgroup_root;
  probe_options.state_dir = d.options.state_dir;
  probe_options.reserve_images = d.options.reserve_disk;
  CORDON_ASSIGN_OR_RETURN(d.probe, contain::ProbeHost(probe_options));
  // Sandboxes that run as uids of their own without a mount namespace
  // reach their workspaces by host path (HOME, a temporary file beside
  // the working directory): the state directory lets them pass (0711),
  // never list; what is in it stays the daemon's own.
  if (d.probe.SandboxesRunAsOwnUids()) {
    if (::chmod(d.options.state_dir.c_str(), 0711) != 0) {
      Log("warning", "state_dir_not_passable",
          {{"state_dir", d.options.state_dir}, {"error", std::strerror(errno)}});
    } else if (std::string closed = FirstClosedAncestor(d.options.state_dir); !closed.empty()) {
      Log("warning", "state_dir_not_reachable",
          {{"state_dir", d.options.state_dir},
           {"directory", closed},
           {"message",
            "sandboxes run as uids of their own here (no user namespace) and reach "
            "their workspaces by host path, but " +
                closed +
                " does not let other users through: HOME and every absolute path "
                "into a workspace fail in them; fix: chmod o+x " +
                closed + ", or choose a state directory whose parents do"}});
    }
  }
  // A warm sandbox sees its workspace at /workspace whatever the directory
  // is renamed to at hand-out; without namespaces it would keep the host
  // path of the pool's, so every create and run starts cold.
  if (!d.probe.isolation.namespaces.available &&
      (d.options.gateway.prespawn || d.options.sessions.prespawn_shells ||
       d.options.prespawn_runs)) {
    Log("warning", "warm_pools_off",
        {{"why", "sandboxes have no namespaces here: " + d.probe.isolation.namespaces.problem},
         {"prespawn", d.options.gateway.prespawn},
         {"prespawn_shells", d.options.sessions.prespawn_shells},
         {"prespawn_runs", d.options.prespawn_runs}});
  }

  // Recovery: every tree an earlier daemon left is torn down (verified,
  // identity-checked) before anything answers.
  contain::ReapOptions reap;
  reap.verify_timeout = d.options.verify_timeout;
  CORDON_ASSIGN_OR_RETURN(auto reports, contain::Reap(*d.store, *d.signaller, reap));
  for (const auto& r : reports) {
    Log(r.action == "survivors" ? "error" : "info", "recovered_grant",
        {{"grant_id", r.grant_id},
         {"action", r.action},
         {"note", r.note},
         {"survivors", r.release.survivors}});
  }
  // The scratch workspaces of runs an earlier daemon left: their trees
  // are reaped now.
  SweepScratch(d.options.state_dir + "/scratch");

  d.reactor = std::make_unique<AsioReactor>(io);
  d.options.sessions.state_dir = d.options.state_dir;
  d.options.sessions.prespawn = d.options.gateway.prespawn;
  d.options.sessions.verify_timeout = d.options.verify_timeout;
  d.options.sessions.bounds = d.options.bounds;
  d.options.sessions.post = d.reactor->Poster();
  session::Observer observer;
  Impl* self = &d;
  observer.ready = [self](std::chrono::microseconds took) {
    self->metrics.spawn_seconds.Observe(std::chrono::duration<double>(took).count());
  };
  observer.released = [self](const contain::Release& r) {
    self->metrics.teardown_seconds.Observe(std::chrono::duration<double>(r.duration).count());
  };
  observer.died = [self](const std::string& kind) { ++self->metrics.runtimes_died[kind]; };
  observer.log = [](const std::string& event, const json& fields) {
    Log(event == "session_quarantined" || event == "store_error" ? "error" : "info", event, fields);
  };
  if (d.options.extension) {
    ExtensionServices services{*d.reactor,
                               *d.store,
                               *d.signaller,
                               d.probe,
                               d.metrics,
                               d.options.state_dir,
                               d.options.verify_timeout,
                               nullptr};
    CORDON_ASSIGN_OR_RETURN(d.extension, d.options.extension(services));
    d.options.sessions.python = std::move(services.python);
  }
  // Ended sessions past --keep-records are forgotten before the rest are
  // loaded; released grants go in the background (below).
  for (size_t forgotten = 0;;) {
    CORDON_ASSIGN_OR_RETURN(auto ids, d.store->PruneSessions(d.KeepSince(), Impl::kPruneBatch));
    forgotten += ids.size();
    if (static_cast<int64_t>(ids.size()) == Impl::kPruneBatch) continue;
    if (forgotten) {
      Log("info", "records_pruned",
          {{"grants", 0},
           {"sessions", forgotten},
           {"keep_records_ms", d.options.keep_records.count()}});
    }
    break;
  }
  CORDON_ASSIGN_OR_RETURN(d.sessions,
                          session::Sessions::Create(*d.reactor, *d.store, *d.signaller, d.probe,
                                                    d.options.sessions, std::move(observer)));
  CORDON_RETURN_IF_ERROR(d.sessions->Recover());
  if (d.extension) d.extension->Attach(*d.sessions);
  d.runs = std::make_unique<Runs>(
      *d.reactor, *d.store, *d.signaller, d.probe, d.metrics,
      RunsOptions{d.options.state_dir, d.options.max_runs, d.options.verify_timeout,
                  d.options.bounds, d.options.prespawn_runs,
                  // Unverified teardowns are retried as the sessions' are.
                  d.options.sessions.tick});
  d.runs->FillPool();
  d.mcp = std::make_unique<mcp::Server>(
      mcp::Engine{*d.runs, *d.sessions, d.options.max_file_bytes, d.options.mcp_output_limit});
  d.mcp_http = std::make_unique<mcp::HttpTransport>(
      *d.mcp, mcp::HttpTransport::Options{.idle_ttl = d.options.mcp_session_ttl,
                                          .max_sessions = d.options.mcp_max_sessions});

  d.token_path = d.options.token_file.value_or(d.options.state_dir + "/token");
  CORDON_ASSIGN_OR_RETURN(d.token, LoadOrCreateToken(d.token_path, !d.options.token_file));

  HttpHooks hooks;
  hooks.admit = [self](const Header& h, uint64_t& limit) { return self->Admit(h, limit); };
  hooks.handle = [self](Request r, std::shared_ptr<Exchange> ex) {
    self->Handle(std::move(r), std::move(ex));
  };
  hooks.answered = [self](const Request& r, int status) { self->Answered(r, status); };
  // Past --max-connections the reserve keeps the health check answering.
  hooks.reserved = [](const Header& h) {
    const std::string target(h.target());
    return (h.method() == http::verb::get || h.method() == http::verb::head) &&
           target.substr(0, target.find('?')) == "/v1/health";
  };
  d.server = std::make_unique<HttpServer>(io, d.options.http, std::move(hooks));
  for (const auto& [unix_path, a] : addresses) {
    auto url =
        unix_path.empty() ? d.server->ListenTcp(a.host, a.port) : d.server->ListenUnix(unix_path);
    if (!url) return std::unexpected(url.error());
    d.urls.push_back(*url);
  }
  if (!d.urls.empty()) d.WriteServeFile();
  d.SchedulePrune(std::chrono::milliseconds(0));
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

void Daemon::Shutdown(std::function<void(bool)> done) {
  Impl& d = *impl_;
  d.stopping = true;
  d.prune_timer.cancel();
  d.server->StopAccepting();
  // Both halves report once; `done` runs after the second.
  struct Pending {
    int left = 2;
    bool all_dead = true;
    std::function<void(bool)> done;
  };
  auto pending = std::make_shared<Pending>(Pending{2, true, std::move(done)});
  auto half = [pending](bool all_dead) {
    pending->all_dead &= all_dead;
    if (--pending->left == 0) pending->done(pending->all_dead);
  };
  if (d.extension) d.extension->Stop();
  d.runs->Stop(half);
  d.sessions->Shutdown(half);
}

}  // namespace cordon::api
