#include "api/daemon.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>

#include "api/asio_reactor.h"
#include "api/log.h"
#include "api/metrics.h"
#include "api/requests.h"
#include "contain/grant.h"
#include "contain/probe.h"
#include "contain/reap.h"
#include "run/execution.h"
#include "session/files.h"
#include "session/framing.h"
#include "store/store.h"
#include "sys/json_text.h"
#include "sys/random.h"

#ifndef CORDON_VERSION
#define CORDON_VERSION "dev"
#endif

namespace cordon::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    size_t eq = pair.find('=');
    out[PercentDecode(pair.substr(0, eq))] =
        eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return out;
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool Truthy(const std::string& v) { return v == "true" || v == "1" || v == "yes"; }

// A run in flight: its Execution, and what it answers to.
struct ActiveRun {
  uint64_t id;
  std::shared_ptr<Exchange> exchange;
  std::unique_ptr<run::Execution> execution;
  std::string scratch;  // a workspace made for it, removed afterwards
  bool streaming = false;
};

}  // namespace

struct Daemon::Impl {
  asio::io_context& io;
  DaemonOptions options;
  std::optional<store::Store> store;
  contain::Probe probe;
  contain::KernelSignaller kernel;
  contain::Signaller* signaller = nullptr;
  std::unique_ptr<AsioReactor> reactor;
  std::unique_ptr<session::Sessions> sessions;
  std::unique_ptr<HttpServer> server;
  std::string token;
  std::string token_path;
  std::vector<std::string> urls;
  Metrics metrics;
  std::map<uint64_t, std::unique_ptr<ActiveRun>> runs;
  uint64_t next_run = 1;
  bool stopping = false;
  bool runs_all_dead = true;
  std::function<void()> runs_drained;

  Impl(asio::io_context& io, DaemonOptions options) : io(io), options(std::move(options)) {}

  // --- Admission of a request, after its header. ---
  std::optional<ApiError> Admit(const Header& header, uint64_t& body_limit) {
    std::string target(header.target());
    std::string path = target.substr(0, target.find('?'));
    if (header.method() == http::verb::put && path.starts_with("/v1/sessions/") &&
        path.find("/files/") != std::string::npos) {
      // The maximum file size, plus room for a 413 of our own for a body
      // that says how large it is.
      body_limit = options.max_file_bytes;
    }
    if (path == "/v1/health") return std::nullopt;
    if (!Authorized(header)) {
      return ApiError{401, "unauthorized",
                      "a valid token is required: Authorization: Bearer <token>", "", nullptr};
    }
    return std::nullopt;
  }

  bool Authorized(const Header& header) const {
    const std::string value(header[http::field::authorization]);
    std::string_view given;
    for (std::string_view scheme : {"Bearer ", "bearer ", "token ", "Token "}) {
      if (value.starts_with(scheme)) given = std::string_view(value).substr(scheme.size());
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
    auto is = [&](std::initializer_list<const char*> want) {
      if (seg.size() != want.size()) return false;
      size_t i = 0;
      for (const char* w : want) {
        if (*w != '*' && seg[i] != w) return false;
        ++i;
      }
      return true;
    };
    auto not_allowed = [&](const char* allow) {
      ex->RespondJson(
          405,
          ToJson(ApiError{405, "method_not_allowed",
                          std::string(request.message.method_string()) + " is not " +
                              "allowed on " + request.path + " (allowed: " + allow + ")",
                          "", nullptr}),
          {{"Allow", allow}});
    };
    if (is({"v1", "health"})) {
      if (method != http::verb::get) return not_allowed("GET");
      return ex->RespondJson(200, {{"status", stopping ? "stopping" : "ok"},
                                   {"version", CORDON_VERSION},
                                   {"runs_active", runs.size()},
                                   {"sessions_active", sessions->live()},
                                   {"sessions_quarantined", sessions->quarantined()}});
    }
    if (is({"v1", "probe"})) {
      if (method != http::verb::get) return not_allowed("GET");
      return ex->RespondJson(200, contain::ToJson(probe));
    }
    if (is({"metrics"})) {
      if (method != http::verb::get) return not_allowed("GET");
      return ex->Respond(200,
                         metrics.Render(runs.size(), sessions->live(), sessions->quarantined()),
                         "text/plain; version=0.0.4");
    }
    if (is({"v1", "runs"})) {
      if (method != http::verb::post) return not_allowed("POST");
      return StartRun(request, ex);
    }
    if (is({"v1", "sessions"})) {
      if (method == http::verb::post) return CreateSession(request, ex);
      if (method == http::verb::get) return ex->RespondJson(200, {{"sessions", sessions->List()}});
      return not_allowed("GET, POST");
    }
    if (seg.size() >= 3 && seg[0] == "v1" && seg[1] == "sessions") {
      const std::string id = PercentDecode(seg[2]);
      if (seg.size() == 3) {
        if (method == http::verb::get) return Reply(ex, sessions->Get(id));
        if (method == http::verb::delete_) {
          bool keep = Truthy(ParseQuery(request.query)["keep_workspace"]);
          return sessions->Delete(id, keep, [this, ex](session::Outcome<json> r) { Reply(ex, r); });
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
      if (seg[3] == "files") return Files(id, seg, request, ex);
    }
    ex->RespondError(ApiError{404, "not_found", "no such endpoint: " + request.path, "", nullptr});
  }

  void Reply(const std::shared_ptr<Exchange>& ex, const session::Outcome<json>& r) {
    if (!r) return ex->RespondError(FromSession(r.error()));
    ex->RespondJson(200, *r);
  }

  // --- Runs. ---
  void StartRun(const Request& request, const std::shared_ptr<Exchange>& ex) {
    auto body = ParseObject(request.message.body());
    if (!body) return ex->RespondError(body.error());
    auto spec = ParseRun(*body);
    if (!spec) return ex->RespondError(spec.error());
    if (stopping) {
      return ex->RespondError(
          ApiError{503, "stopping", "the daemon is shutting down", "", nullptr});
    }
    if (runs.size() >= options.max_runs) {
      return ex->RespondError(ApiError{
          429, "over_capacity",
          "at most " + std::to_string(options.max_runs) + " runs may be in progress at once", "",
          nullptr});
    }
    auto active = std::make_unique<ActiveRun>();
    active->id = next_run++;
    active->exchange = ex;
    if (!spec->workspace) {
      // Nothing of the daemon's own directory: a run without a workspace
      // gets a fresh empty one, removed afterwards.
      active->scratch = options.state_dir + "/scratch/" + sys::RandomHex(8);
      std::error_code ec;
      std::filesystem::create_directories(active->scratch, ec);
      ::chmod(active->scratch.c_str(), 0700);
      spec->workspace = active->scratch;
    }
    auto grant = contain::Acquire(*spec, probe, *store);
    if (!grant) {
      RemoveScratch(*active);
      return ex->RespondError(FromSession(session::FromAdmit(grant.error())));
    }
    std::string accept(request.message[http::field::accept]);
    active->streaming = accept.find("application/x-ndjson") != std::string::npos;
    ActiveRun* run = active.get();
    run::ExecutionOptions exec_options;
    exec_options.verify_timeout = options.verify_timeout;
    exec_options.on_output = [this, run](run::StreamId id, std::string_view bytes) {
      metrics.bytes_captured += bytes.size();
      if (!run->streaming) return;
      json event = {{"type", id == run::StreamId::kStdout ? "stdout" : "stderr"},
                    {"data", std::string(bytes)}};
      run->exchange->Stream(sys::JsonText(event) + "\n");
    };
    const uint64_t run_id = run->id;
    const std::string request_id = request.id;
    auto started = Clock::now();
    auto execution = run::Execution::Start(*reactor, *store, *signaller, std::move(*grant), *spec,
                                           std::move(exec_options),
                                           [this, run_id, request_id](run::RunResult r) {
                                             OnRunDone(run_id, request_id, std::move(r));
                                           });
    if (!execution) {
      RemoveScratch(*active);
      return ex->RespondError(ApiError{500, "internal", execution.error().message(), "", nullptr});
    }
    metrics.spawn_seconds.Observe(Seconds(Clock::now() - started));
    active->execution = std::move(*execution);
    Log("info", "run_started",
        {{"request_id", request.id}, {"grant_id", run->execution->grant_id()}});
    if (run->streaming) ex->BeginStream(200, "application/x-ndjson");
    runs.emplace(run_id, std::move(active));
    // A client that goes away cancels its run: teardown, recorded `cancelled`.
    ex->WatchClient([this, run_id] {
      auto it = runs.find(run_id);
      if (it == runs.end() || !it->second->execution) return;
      Log("info", "run_client_gone", {{"grant_id", it->second->execution->grant_id()}});
      it->second->execution->Cancel();
    });
  }

  void RemoveScratch(const ActiveRun& run) {
    if (run.scratch.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(run.scratch, ec);
  }

  void OnRunDone(uint64_t run_id, const std::string& request_id, run::RunResult r) {
    auto it = runs.find(run_id);
    if (it == runs.end()) return;
    ActiveRun& run = *it->second;
    ++metrics.runs_by_outcome[std::string(run::OutcomeName(r.outcome))];
    metrics.teardown_seconds.Observe(std::chrono::duration<double>(r.release.duration).count());
    if (!r.release.dead) runs_all_dead = false;
    Log(r.release.dead ? "info" : "error", "run_finished",
        {{"request_id", request_id},
         {"grant_id", r.grant.id},
         {"outcome", run::OutcomeName(r.outcome)},
         {"dead", r.release.dead}});
    json result = run::ToJson(r);
    if (run.streaming) {
      result["type"] = "result";
      run.exchange->Stream(sys::JsonText(result) + "\n");
      run.exchange->EndStream();
    } else {
      run.exchange->RespondJson(200, result);
    }
    RemoveScratch(run);
    // The Execution is still on the stack: destroy it from the loop.
    asio::post(io, [this, run_id] {
      runs.erase(run_id);
      if (runs.empty() && runs_drained) {
        auto drained = std::move(runs_drained);
        runs_drained = nullptr;
        drained();
      }
    });
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
      ex->RespondJson(200, session::ToJson(*r));
    });
  }

  void Files(const std::string& id, const std::vector<std::string>& seg, const Request& request,
             const std::shared_ptr<Exchange>& ex) {
    const http::verb method = request.message.method();
    auto workspace = sessions->Workspace(id);
    if (!workspace) return ex->RespondError(FromSession(workspace.error()));
    const int fd = workspace->get();
    auto query = ParseQuery(request.query);
    if (seg.size() == 4) {
      if (method != http::verb::get) {
        return ex->RespondJson(405,
                               ToJson(ApiError{405, "method_not_allowed",
                                               "list a directory with GET ?dir=PATH", "", nullptr}),
                               {{"Allow", "GET"}});
      }
      auto listing = session::ListFiles(fd, query["dir"]);
      if (!listing) return ex->RespondError(FromSession(listing.error()));
      return ex->RespondJson(
          200, {{"dir", query["dir"].empty() ? "." : query["dir"]}, {"entries", *listing}});
    }
    std::string path;
    for (size_t i = 4; i < seg.size(); ++i) path += (i > 4 ? "/" : "") + PercentDecode(seg[i]);
    switch (method) {
      case http::verb::put: {
        session::PutRequest put;
        put.path = path;
        put.max_bytes = options.max_file_bytes;
        if (query.contains("offset")) {
          const std::string& text = query["offset"];
          uint64_t offset = 0;
          auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), offset);
          if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
            return ex->RespondError(
                Invalid("offset", "offset: must be a byte count, got \"" + text + "\""));
          }
          put.offset = offset;
        }
        std::string digest(request.message["X-Content-SHA256"]);
        if (!digest.empty()) put.sha256 = digest;
        auto info = session::PutFile(fd, put, request.message.body());
        if (!info) return ex->RespondError(FromSession(info.error()));
        return ex->RespondJson(put.offset && *put.offset > 0 ? 200 : 201,
                               {{"path", path},
                                {"size", info->size},
                                {"sha256", info->sha256},
                                {"mtime_ms", info->mtime_ms}});
      }
      case http::verb::get:
      case http::verb::head: {
        bool head = method == http::verb::head;
        auto content = session::GetFile(fd, path, !head, options.max_file_bytes);
        if (!content) {
          if (head) {
            ApiError e = FromSession(content.error());
            return ex->Respond(e.status, "", "", {}, 0);
          }
          return ex->RespondError(FromSession(content.error()));
        }
        Exchange::Headers headers = {{"X-Content-SHA256", content->info.sha256}};
        if (head) {
          return ex->Respond(200, "", "application/octet-stream", std::move(headers),
                             content->info.size);
        }
        return ex->Respond(200, std::move(content->body), "application/octet-stream",
                           std::move(headers));
      }
      case http::verb::delete_: {
        auto deleted = session::DeleteFile(fd, path);
        if (!deleted) return ex->RespondError(FromSession(deleted.error()));
        return ex->RespondJson(200, {{"path", path}, {"deleted", true}});
      }
      default:
        ex->RespondJson(405,
                        ToJson(ApiError{405, "method_not_allowed",
                                        "files take GET, HEAD, PUT and DELETE", "", nullptr}),
                        {{"Allow", "GET, HEAD, PUT, DELETE"}});
    }
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
  ::unlink((impl_->options.state_dir + "/serve.json").c_str());
}

const std::vector<std::string>& Daemon::urls() const { return impl_->urls; }
const std::string& Daemon::token_path() const { return impl_->token_path; }

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
  d.store.emplace(std::move(store));
  contain::ProbeOptions probe_options;
  probe_options.cgroups.cgroup_root = d.options.cgroup_root;
  CORDON_ASSIGN_OR_RETURN(d.probe, contain::ProbeHost(probe_options));

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

  d.reactor = std::make_unique<AsioReactor>(io);
  d.options.sessions.state_dir = d.options.state_dir;
  d.options.sessions.verify_timeout = d.options.verify_timeout;
  session::Observer observer;
  Impl* self = &d;
  observer.ready = [self](std::chrono::microseconds took) {
    self->metrics.spawn_seconds.Observe(std::chrono::duration<double>(took).count());
  };
  observer.released = [self](const contain::Release& r) {
    self->metrics.teardown_seconds.Observe(std::chrono::duration<double>(r.duration).count());
  };
  observer.log = [](const std::string& event, const json& fields) {
    Log(event == "session_quarantined" || event == "store_error" ? "error" : "info", event, fields);
  };
  CORDON_ASSIGN_OR_RETURN(d.sessions,
                          session::Sessions::Create(*d.reactor, *d.store, *d.signaller, d.probe,
                                                    d.options.sessions, std::move(observer)));
  CORDON_RETURN_IF_ERROR(d.sessions->Recover());

  d.token_path = d.options.token_file.value_or(d.options.state_dir + "/token");
  CORDON_ASSIGN_OR_RETURN(d.token, LoadOrCreateToken(d.token_path, !d.options.token_file));

  HttpHooks hooks;
  hooks.admit = [self](const Header& h, uint64_t& limit) { return self->Admit(h, limit); };
  hooks.handle = [self](Request r, std::shared_ptr<Exchange> ex) {
    self->Handle(std::move(r), std::move(ex));
  };
  hooks.answered = [self](const Request& r, int status) { self->Answered(r, status); };
  d.server = std::make_unique<HttpServer>(io, d.options.http, std::move(hooks));
  for (const auto& [unix_path, a] : addresses) {
    auto url =
        unix_path.empty() ? d.server->ListenTcp(a.host, a.port) : d.server->ListenUnix(unix_path);
    if (!url) return std::unexpected(url.error());
    d.urls.push_back(*url);
  }
  d.WriteServeFile();
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

void Daemon::Shutdown(std::function<void(bool)> done) {
  Impl& d = *impl_;
  d.stopping = true;
  d.server->StopAccepting();
  auto sessions_done = std::make_shared<std::optional<bool>>();
  auto finish = [&d, sessions_done, done] {
    if (!sessions_done->has_value() || !d.runs.empty()) return;
    done(**sessions_done && d.runs_all_dead);
  };
  d.runs_drained = finish;
  for (auto& [id, run] : d.runs) {
    if (run->execution) run->execution->Cancel();
  }
  d.sessions->Shutdown([sessions_done, finish](bool all_dead) {
    *sessions_done = all_dead;
    finish();
  });
}

}  // namespace cordon::api
