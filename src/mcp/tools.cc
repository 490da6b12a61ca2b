#include "mcp/tools.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <utility>

#include "api/requests.h"
#include "mcp/output.h"
#include "session/files.h"
#include "sys/json_text.h"
#include "sys/text.h"

namespace cordon::mcp {
namespace {

using nlohmann::json;

// An argument's name in the HTTP API's body, and in a tool's arguments:
// the API's messages name the first, the agent knows only the second.
using Renames = std::vector<std::pair<std::string, std::string>>;

// The message of an error of the API, naming its field in the tool's terms.
std::string Describe(const api::ApiError& e, const Renames& renames = {}) {
  std::string message = e.message;
  if (!e.field.empty() && !message.starts_with(e.field + ":")) {
    message = e.field + ": " + message;
  }
  for (const auto& [from, to] : renames) {
    if (message.starts_with(from + ":") || message.starts_with(from + ".")) {
      message = to + message.substr(from.size());
      break;
    }
  }
  return message;
}

std::string Describe(const session::Error& e) { return Describe(api::FromSession(e)); }

// The arguments are an object of the names in `known` (what the schema's
// additionalProperties: false says; clients need not check it).
std::optional<std::string> Unknown(const json& args, const std::vector<std::string>& known) {
  for (const auto& [key, value] : args.items()) {
    bool found = false;
    for (const auto& k : known) found |= k == key;
    if (found) continue;
    return key + ": unknown argument (known: " + (known.empty() ? "none" : sys::JoinNames(known)) +
           ")";
  }
  return std::nullopt;
}

// A session tool's `id`.
std::optional<std::string> SessionId(const json& args, std::string& id) {
  if (!args.contains("id") || !args["id"].is_string() || args["id"].get<std::string>().empty()) {
    return "id: is required: the session's id (from session_create or session_list)";
  }
  id = args["id"].get<std::string>();
  return std::nullopt;
}

// What the sandbox calls the session's workspace: /workspace inside a
// sandbox's own mount namespace, the host path without one.
std::string SandboxWorkspace(const json& view) {
  const json& spec = view.value("spec", json::object());
  const json& iso = spec.is_object() ? spec.value("isolation", json::object()) : json::object();
  if (iso.is_object() && iso.value("level", "") == "none") return view.value("workspace", "");
  return "/workspace";
}

json SessionBrief(const json& view) {
  return {{"id", view.value("id", "")},
          {"kind", view.value("kind", "")},
          {"state", view.value("state", "")},
          {"workspace", SandboxWorkspace(view)}};
}

json Schema(const char* text) { return json::parse(text); }

// How long a cancelled shell exec has to come back after SIGINT: the
// default grace of the timeout ladder (limits.grace_ms).
constexpr std::chrono::milliseconds kCancelGrace{2000};

// --- The tools. ---

void Run(Engine& engine, const Call& call, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"command", "argv", "stdin", "timeout_ms", "env", "isolation",
                                    "network", "limits"})) {
    return done(ToolError(*unknown));
  }
  // The body of POST /v1/runs.
  json body = {{"owner", "mcp"}};
  Renames renames = {{"shell", "command"}};
  if (args.contains("command")) body["shell"] = args["command"];
  for (const char* same : {"argv", "stdin", "env", "limits", "isolation"}) {
    if (args.contains(same)) body[same] = args[same];
  }
  if (args.contains("timeout_ms")) {
    if (!body.contains("limits")) body["limits"] = json::object();
    // A limits that is not an object is refused by ParseRun, naming it.
    if (body["limits"].is_object()) {
      body["limits"]["timeout_ms"] = args["timeout_ms"];
      renames.push_back({"limits.timeout_ms", "timeout_ms"});
    }
  }
  if (args.contains("network")) {
    json& iso = body["isolation"];
    if (iso.is_null()) iso = json::object();
    if (iso.is_string()) iso = {{"level", iso}};
    if (iso.is_object()) {
      iso["network"] = args["network"];
      renames.push_back({"isolation.network", "network"});
    }
  }
  if (!args.contains("command") && !args.contains("argv")) {
    return done(ToolError("command: give command (a shell command line) or argv"));
  }
  auto spec = api::ParseRun(body);
  if (!spec) return done(ToolError(Describe(spec.error(), renames)));
  const uint64_t limit = engine.output_limit;
  const uint64_t id = engine.runs.Submit(
      std::move(*spec), "mcp",
      [call, done, limit, renames](std::expected<run::RunResult, api::ApiError> r) {
        if (!r) {
          call->Log("warning", "run_refused", {{"error", Describe(r.error(), renames)}});
          return done(ToolError(Describe(r.error(), renames)));
        }
        // The teardown's result, whether the client still waits for it or
        // cancelled the call.
        call->Log(r->release.dead ? "info" : "error", "run_finished",
                  {{"grant_id", r->grant.id},
                   {"outcome", run::OutcomeName(r->outcome)},
                   {"dead", r->release.dead}});
        if (r->outcome == run::Outcome::kSetupFailed) {
          // The command never ran.
          json e = run::ToJson(*r)["setup_error"];
          std::string why = "the command could not start";
          if (e.is_object()) {
            why += ": " + e.value("step", std::string()) + ": " + e.value("errno", std::string()) +
                   " (" + e.value("message", std::string()) + ")";
            if (e["detail"].is_string()) why += ": " + e["detail"].get<std::string>();
          }
          return done(ToolError(why));
        }
        Bounded out = BoundOutput(std::move(r->out.data), limit, r->out.bytes, r->out.truncated);
        Bounded err = BoundOutput(std::move(r->err.data), limit, r->err.bytes, r->err.truncated);
        done(ToolOk({{"outcome", run::OutcomeName(r->outcome)},
                     {"exit_code", r->exit_code ? json(*r->exit_code) : json()},
                     {"signal", r->signal ? json(*r->signal) : json()},
                     {"stdout", std::move(out.text)},
                     {"stderr", std::move(err.text)},
                     {"stdout_truncated", out.truncated},
                     {"stderr_truncated", err.truncated},
                     {"timed_out", r->timed_out},
                     {"oom_killed", r->oom_killed},
                     {"dead", r->release.dead},
                     {"duration_ms", r->usage.wall_ms}}));
      },
      [call](run::StreamId, std::string_view bytes) { call->Output(bytes); });
  // Cancelled: torn down like a run whose client went away (verified,
  // recorded `cancelled`); the result that follows is dropped.
  if (id != 0) call->OnCancel([&runs = engine.runs, id] { runs.Cancel(id); });
}

void SessionCreate(Engine& engine, const Call& call, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"kind", "id", "env", "limits", "isolation", "ttl_s"})) {
    return done(ToolError(*unknown));
  }
  auto create = api::ParseSession(args);
  if (!create) return done(ToolError(Describe(create.error())));
  auto created = [call, done](session::Outcome<session::Sessions::Created> r) {
    if (!r) {
      call->Log("warning", "session_refused", {{"error", Describe(r.error())}});
      return done(ToolError(Describe(r.error())));
    }
    json brief = SessionBrief(r->session);
    brief["created"] = r->created;
    // Only a session this call made is this connection's to close.
    if (r->created) {
      call->SessionCreated(brief["id"].get<std::string>());
      call->Log("info", "session_created", {{"session_id", brief["id"]}, {"kind", brief["kind"]}});
    }
    done(ToolOk(std::move(brief)));
  };
  engine.sessions.CreateSession(std::move(*create), std::move(created));
}

json ExecStructured(session::ExecResult& r, uint64_t limit, json& images) {
  if (r.kernel) {
    jupyter::ExecuteOutput& k = *r.kernel;
    Bounded out = BoundOutput(std::move(k.stdout_text), limit);
    Bounded err = BoundOutput(std::move(k.stderr_text), limit);
    for (auto& result : k.results) {
      json* data = result.is_object() && result.contains("data") ? &result["data"] : nullptr;
      if (data && data->is_object() && data->contains("image/png") &&
          (*data)["image/png"].is_string()) {
        // Jupyter's base64 may be wrapped in lines; MCP's is plain. It goes
        // as image content, and only its size stays in the result.
        std::string png = (*data)["image/png"].get<std::string>();
        std::erase_if(png, [](char c) { return c == '\n' || c == '\r' || c == ' '; });
        (*data)["image/png"] =
            "[" + std::to_string(png.size()) + " bytes of base64, sent as image content]";
        images.push_back({{"type", "image"}, {"data", std::move(png)}, {"mimeType", "image/png"}});
      }
    }
    // The results (a repr, an HTML table) and the traceback are bounded as
    // the streams are: each within the limit, whatever their shape.
    uint64_t results_budget = limit, error_budget = limit;
    const bool results_cut = BoundStrings(k.results, results_budget);
    const bool error_cut = BoundStrings(k.error, error_budget);
    return {
        {"status", k.status.empty() ? "error" : k.status},
        {"stdout", std::move(out.text)},
        {"stderr", std::move(err.text)},
        {"results", std::move(k.results)},
        {"error", std::move(k.error)},
        {"execution_count", k.execution_count ? json(*k.execution_count) : json()},
        {"truncated", k.truncated || out.truncated || err.truncated || results_cut || error_cut},
        {"timed_out", r.timed_out},
        {"invalidated", r.invalidated},
        {"oom_killed", r.oom_killed},
        {"duration_ms", r.duration_ms}};
  }
  Bounded out = BoundOutput(std::move(r.out.data), limit, r.out.bytes, r.out.truncated);
  Bounded err = BoundOutput(std::move(r.err.data), limit, r.err.bytes, r.err.truncated);
  return {{"exit_code", r.exit_code ? json(*r.exit_code) : json()},
          {"stdout", std::move(out.text)},
          {"stderr", std::move(err.text)},
          {"stdout_truncated", out.truncated},
          {"stderr_truncated", err.truncated},
          {"timed_out", r.timed_out},
          {"invalidated", r.invalidated},
          {"shell_restarted", r.shell_restarted},
          {"oom_killed", r.oom_killed},
          {"duration_ms", r.duration_ms}};
}

void SessionExec(Engine& engine, const Call& call, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"id", "command", "code", "timeout_ms", "stdin"})) {
    return done(ToolError(*unknown));
  }
  std::string id;
  if (auto bad = SessionId(args, id)) return done(ToolError(*bad));
  json body = args;
  body.erase("id");
  auto exec = api::ParseExec(body);
  if (!exec) return done(ToolError(Describe(exec.error())));
  // Its output as it streams: the latest line is its progress message. Weak:
  // a call that was answered or cancelled is not kept alive by the session.
  exec->on_output = [weak_call = std::weak_ptr<CallContext>(call)](std::string_view bytes) {
    if (auto c = weak_call.lock()) c->Output(bytes);
  };
  const uint64_t limit = engine.output_limit;
  auto ticket = std::make_shared<ExecTicket>();
  std::shared_ptr<ExecLines> lines = engine.execs;
  (*lines)[id].push_back(ticket);
  session::Sessions& sessions = engine.sessions;
  boost::asio::io_context& io = engine.runs.reactor().io();
  const bool shell = sessions.KindOf(id) == "shell";
  std::weak_ptr<ExecTicket> weak = ticket;
  // Cancelled: SIGINT, as session_interrupt sends. A shell that is not back
  // within kCancelGrace is replaced (the tree torn down, verified, a fresh
  // shell in the same workspace); a kernel has its own ladder
  // (--interrupt-grace).
  ticket->interrupt = [&sessions, &io, id, shell, weak, call] {
    auto interrupted = sessions.Interrupt(id);
    call->Log("info", "exec_cancelled",
              {{"session_id", id}, {"interrupted", interrupted && *interrupted}});
    if (!shell) return;
    auto timer = std::make_shared<boost::asio::steady_timer>(io, kCancelGrace);
    timer->async_wait([&sessions, id, weak, timer, call](const boost::system::error_code& ec) {
      auto t = weak.lock();
      if (ec || !t || t->finished) return;
      call->Log("warning", "exec_escalated",
                {{"session_id", id},
                 {"why", "the shell was not back within " + std::to_string(kCancelGrace.count()) +
                             " ms of SIGINT: it is torn down and replaced"}});
      sessions.Restart(id, [call, id](session::Outcome<json> r) {
        if (r) return call->Log("info", "session_restarted", {{"session_id", id}});
        call->Log("error", "session_restart_failed",
                  {{"session_id", id}, {"error", Describe(r.error())}});
      });
    });
  };
  call->OnCancel([lines, id, weak] {
    auto t = weak.lock();
    if (!t || t->finished) return;
    t->cancelled = true;
    auto it = lines->find(id);
    if (it != lines->end() && it->second.front() == t) t->interrupt();
  });
  engine.sessions.Exec(
      id, std::move(*exec),
      [done, limit, lines, id, ticket, &io](session::Outcome<session::ExecResult> r) {
        ticket->finished = true;
        if (auto it = lines->find(id); it != lines->end()) {
          std::erase(it->second, ticket);
          if (it->second.empty()) {
            lines->erase(it);
          } else if (it->second.front()->cancelled) {
            // The next exec starts once this one is answered: it is
            // interrupted from the loop, after that.
            boost::asio::post(io, [next = std::weak_ptr<ExecTicket>(it->second.front())] {
              if (auto n = next.lock(); n && !n->finished) n->interrupt();
            });
          }
        }
        if (!r) return done(ToolError(Describe(r.error())));
        json images = json::array();
        json result = ToolOk(ExecStructured(*r, limit, images));
        for (auto& image : images) result["content"].push_back(std::move(image));
        done(std::move(result));
      });
}

void SessionInterrupt(Engine& engine, const Call& /*call*/, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"id"})) return done(ToolError(*unknown));
  std::string id;
  if (auto bad = SessionId(args, id)) return done(ToolError(*bad));
  auto interrupted = engine.sessions.Interrupt(id);
  if (!interrupted) return done(ToolError(Describe(interrupted.error())));
  auto view = engine.sessions.Get(id);
  if (!view) return done(ToolError(Describe(view.error())));
  json brief = SessionBrief(*view);
  brief["interrupted"] = *interrupted;
  done(ToolOk(std::move(brief)));
}

void SessionClose(Engine& engine, const Call& call, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"id", "keep_workspace"})) return done(ToolError(*unknown));
  std::string id;
  if (auto bad = SessionId(args, id)) return done(ToolError(*bad));
  bool keep = false;
  if (args.contains("keep_workspace")) {
    if (!args["keep_workspace"].is_boolean()) {
      return done(ToolError("keep_workspace: must be true or false"));
    }
    keep = args["keep_workspace"].get<bool>();
  }
  engine.sessions.Delete(id, keep, [call, done, id](session::Outcome<json> r) {
    if (!r) return done(ToolError(Describe(r.error())));
    call->SessionClosed(id);
    call->Log("info", "session_closed", {{"session_id", id}});
    json brief = r->is_object() && r->contains("id") ? SessionBrief(*r)
                                                     : json{{"id", id}, {"state", "closed"}};
    done(ToolOk(std::move(brief)));
  });
}

void SessionList(Engine& engine, const Call& /*call*/, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"kind", "state", "after", "limit"})) {
    return done(ToolError(*unknown));
  }
  std::optional<std::string> kind;
  if (args.contains("kind")) {
    if (!args["kind"].is_string()) return done(ToolError("kind: must be a string"));
    kind = args["kind"].get<std::string>();
  }
  // Every state but closed unless asked: a week of closed sessions is
  // noise to an agent looking for one to use.
  std::vector<std::string> states;
  if (!args.contains("state")) {
    std::ranges::copy_if(session::kSessionStates, std::back_inserter(states),
                         [](const std::string& state) { return state != "closed"; });
  } else if (!args["state"].is_array() || args["state"].empty() ||
             !std::ranges::all_of(args["state"], [](const json& v) { return v.is_string(); })) {
    return done(ToolError("state: must be an array of one or more states"));
  } else {
    states = args["state"].get<std::vector<std::string>>();
  }
  std::optional<std::string> after;
  if (args.contains("after")) {
    if (!args["after"].is_string()) return done(ToolError("after: must be a session id"));
    after = args["after"].get<std::string>();
  }
  // A page an agent can read: 100 unless asked (at most kMaxListLimit).
  int64_t limit = 100;
  if (args.contains("limit")) {
    if (!args["limit"].is_number_integer()) {
      return done(ToolError("limit: must be an integer from 1 to " +
                            std::to_string(session::kMaxListLimit)));
    }
    limit = args["limit"].get<int64_t>();
  }
  auto filter = session::MakeListFilter(kind, states, after, limit);
  if (!filter) return done(ToolError(Describe(filter.error())));
  engine.sessions.List<json>(
      *filter,
      [](session::Listing page) {
        json result = {{"sessions", json::array()}};
        for (const auto& view : page.sessions) result["sessions"].push_back(SessionBrief(view));
        if (page.next) result["next"] = *page.next;
        return result;
      },
      [done = std::move(done)](session::Outcome<json> result) {
        if (!result) return done(ToolError(Describe(result.error())));
        done(ToolOk(std::move(*result)));
      });
}

// `work` (a file tool's, returning its result) with session `id`'s
// workspace on a worker (session::Sessions::WithWorkspace); `done` gets
// its result, or why the session could not be used, on the loop.
void OnWorkspace(Engine& engine, const std::string& id, ToolDone done,
                 std::function<json(int workspace_fd)> work) {
  engine.sessions.WithWorkspace<json>(id, std::move(work),
                                      [done = std::move(done)](session::Outcome<json> result) {
                                        if (!result)
                                          return done(ToolError(Describe(result.error())));
                                        done(std::move(*result));
                                      });
}

void FileWrite(Engine& engine, const Call& /*call*/, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"id", "path", "content", "content_base64"})) {
    return done(ToolError(*unknown));
  }
  std::string id;
  if (auto bad = SessionId(args, id)) return done(ToolError(*bad));
  if (!args.contains("path") || !args["path"].is_string()) {
    return done(ToolError("path: is required: a path relative to the workspace"));
  }
  const bool text = args.contains("content"), b64 = args.contains("content_base64");
  if (text == b64) return done(ToolError("content: give either content or content_base64"));
  std::string bytes;
  if (text) {
    if (!args["content"].is_string()) return done(ToolError("content: must be a string"));
    bytes = args["content"].get<std::string>();
  } else {
    auto decoded = args["content_base64"].is_string()
                       ? sys::Base64Decode(args["content_base64"].get<std::string>())
                       : std::nullopt;
    if (!decoded) return done(ToolError("content_base64: is not valid base64"));
    bytes = std::move(*decoded);
  }
  session::PutRequest put;
  put.path = args["path"].get<std::string>();
  put.max_bytes = engine.max_file_bytes;
  OnWorkspace(engine, id, std::move(done), [put, bytes = std::move(bytes)](int fd) {
    auto info = session::PutFile(fd, put, bytes);
    if (!info) return ToolError(Describe(info.error()));
    return ToolOk({{"path", put.path}, {"size", info->size}, {"sha256", info->sha256}});
  });
}

void FileRead(Engine& engine, const Call& /*call*/, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"id", "path", "max_bytes"})) return done(ToolError(*unknown));
  std::string id;
  if (auto bad = SessionId(args, id)) return done(ToolError(*bad));
  if (!args.contains("path") || !args["path"].is_string()) {
    return done(ToolError("path: is required: a path relative to the workspace"));
  }
  uint64_t max_bytes = engine.output_limit;
  if (args.contains("max_bytes")) {
    if (!args["max_bytes"].is_number_unsigned() || args["max_bytes"].get<uint64_t>() == 0) {
      return done(ToolError("max_bytes: must be a positive integer"));
    }
    max_bytes = args["max_bytes"].get<uint64_t>();
  }
  const std::string path = args["path"].get<std::string>();
  OnWorkspace(engine, id, std::move(done),
              [path, max_bytes, max_file_bytes = engine.max_file_bytes](int fd) {
                auto content = session::GetFile(fd, path, true, max_file_bytes);
                if (!content) return ToolError(Describe(content.error()));
                std::string& body = content->body;
                json structured = {
                    {"path", path}, {"size", content->info.size}, {"sha256", content->info.sha256}};
                const bool utf8 = sys::IsUtf8(body);
                size_t keep =
                    utf8 ? Utf8Cut(body, max_bytes) : std::min<size_t>(body.size(), max_bytes);
                structured["truncated"] = keep < body.size();
                body.resize(keep);
                if (utf8) {
                  structured["content"] = std::move(body);
                } else {
                  structured["content_base64"] = sys::Base64Encode(body);
                }
                return ToolOk(std::move(structured));
              });
}

void FileList(Engine& engine, const Call& /*call*/, const json& args, ToolDone done) {
  if (auto unknown = Unknown(args, {"id", "dir"})) return done(ToolError(*unknown));
  std::string id;
  if (auto bad = SessionId(args, id)) return done(ToolError(*bad));
  std::string dir;
  if (args.contains("dir")) {
    if (!args["dir"].is_string()) return done(ToolError("dir: must be a string"));
    dir = args["dir"].get<std::string>();
  }
  OnWorkspace(engine, id, std::move(done), [dir](int fd) {
    auto listing = session::ListFiles(fd, dir);
    if (!listing) return ToolError(Describe(listing.error()));
    json entries = json::array();
    for (const auto& e : *listing) {
      entries.push_back({{"name", e.value("name", "")},
                         {"type", e.value("type", "")},
                         {"size", e.value("size", 0)}});
    }
    return ToolOk({{"dir", dir.empty() ? "." : dir}, {"entries", std::move(entries)}});
  });
}

// --- The schemas. ---

constexpr const char* kLimits =
    R"({"type": "object", "description": "As POST /v1/runs takes them (docs/api.md): memory_bytes, pids, cpu, cpu_seconds, timeout_ms, grace_ms, output_limit_bytes, file_size_bytes, open_files, address_space_bytes, disk_bytes, disk_inodes. Unset: the daemon's defaults."})";
constexpr const char* kEnv =
    R"({"type": "object", "additionalProperties": {"type": "string"}, "description": "Variables set for the command (NAME: value)."})";
constexpr const char* kIsolation =
    R"({"type": "string", "enum": ["none", "standard", "strict"], "description": "The sandbox: standard (default) or strict; none runs unsandboxed (still bounded by cgroups)."})";
constexpr const char* kSessionId =
    R"({"type": "string", "description": "The session's id (from session_create or session_list)."})";
constexpr const char* kBrief =
    R"({"type": "object", "properties": {"id": {"type": "string"}, "kind": {"type": "string"}, "state": {"type": "string"}, "workspace": {"type": "string"}}, "required": ["id", "state"]})";

json Input(json properties, std::vector<std::string> required = {}) {
  json schema = {
      {"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) schema["required"] = required;
  return schema;
}

std::vector<Tool> MakeTools() {
  std::vector<Tool> tools;
  tools.push_back(Tool{
      "run",
      "Run one command in a fresh sandbox and return its outcome and output. A command that "
      "ran is never an error, whatever its exit code: see outcome, exit_code, timed_out. "
      "Each output stream is cut past the server's --mcp-output-limit.",
      Input({{"command",
              {{"type", "string"}, {"description", "A shell command line (run by /bin/sh -c)."}}},
             {"argv",
              {{"type", "array"},
               {"items", {{"type", "string"}}},
               {"description", "The program and its arguments, without a shell."}}},
             {"stdin", {{"type", "string"}, {"description", "Bytes given on standard input."}}},
             {"timeout_ms",
              {{"type", "integer"}, {"minimum", 1}, {"description", "Wall-clock deadline."}}},
             {"env", Schema(kEnv)},
             {"isolation", Schema(kIsolation)},
             {"network",
              {{"type", "string"},
               {"enum", {"none", "host"}},
               {"description", "none (default): no network; host: the host's."}}},
             {"limits", Schema(kLimits)}}),
      Schema(R"({"type": "object", "properties": {
        "outcome": {"type": "string", "description": "exited, signaled, timed_out, oom_killed, cancelled"},
        "exit_code": {"type": ["integer", "null"]}, "signal": {"type": ["integer", "null"]},
        "stdout": {"type": "string"}, "stderr": {"type": "string"},
        "stdout_truncated": {"type": "boolean"}, "stderr_truncated": {"type": "boolean"},
        "timed_out": {"type": "boolean"}, "oom_killed": {"type": "boolean"},
        "dead": {"type": "boolean", "description": "every process of the run was seen dead"},
        "duration_ms": {"type": "integer"}},
        "required": ["outcome", "exit_code", "signal", "stdout", "stderr", "stdout_truncated",
                     "stderr_truncated", "timed_out", "dead", "duration_ms"]})"),
      Run});
  tools.push_back(Tool{
      "session_create",
      "Start a stateful session: a shell (kind shell) or a Python kernel (kind python), with a "
      "workspace of its own that persists between calls.",
      Input({{"kind", {{"type", "string"}, {"enum", {"shell", "python"}}}},
             {"id",
              {{"type", "string"},
               {"description",
                "Choose the id (default: generated); an id already live is "
                "returned as it is."}}},
             {"env", Schema(kEnv)},
             {"limits", Schema(kLimits)},
             {"isolation", Schema(kIsolation)},
             {"ttl_s",
              {{"type", "integer"},
               {"minimum", 1},
               {"description", "Idle time before it closes."}}}}),
      [] {
        json s = Schema(kBrief);
        s["properties"]["created"] = {{"type", "boolean"}};
        s["required"] = {"id", "kind", "state", "workspace"};
        return s;
      }(),
      SessionCreate});
  tools.push_back(Tool{
      "session_exec",
      "Run a command in a shell session (command), or code in a python session (code). A "
      "command that ran is never an error: see exit_code (shell) or status and error (python). "
      "Each output stream, and a python session's results and error, is cut past the server's "
      "--mcp-output-limit.",
      Input({{"id", Schema(kSessionId)},
             {"command", {{"type", "string"}, {"description", "A shell session's command line."}}},
             {"code", {{"type", "string"}, {"description", "A python session's code."}}},
             {"timeout_ms", {{"type", "integer"}, {"minimum", 1}}},
             {"stdin", {{"type", "string"}, {"description", "Shell sessions only."}}}},
            {"id"}),
      Schema(R"({"type": "object", "properties": {
        "exit_code": {"type": ["integer", "null"]}, "status": {"type": "string"},
        "stdout": {"type": "string"}, "stderr": {"type": "string"},
        "stdout_truncated": {"type": "boolean"}, "stderr_truncated": {"type": "boolean"},
        "results": {"type": "array", "description": "python: mime bundles of the results"},
        "error": {"type": ["object", "null"], "description": "python: ename, evalue, traceback"},
        "execution_count": {"type": ["integer", "null"]}, "truncated": {"type": "boolean"},
        "timed_out": {"type": "boolean"}, "invalidated": {"type": "boolean"},
        "shell_restarted": {"type": "boolean"}, "oom_killed": {"type": "boolean"},
        "duration_ms": {"type": "integer"}},
        "required": ["stdout", "stderr", "timed_out", "invalidated"]})"),
      SessionExec});
  tools.push_back(Tool{"session_interrupt",
                       "Send SIGINT to what a session is running (a KeyboardInterrupt in python).",
                       Input({{"id", Schema(kSessionId)}}, {"id"}),
                       [] {
                         json s = Schema(kBrief);
                         s["properties"]["interrupted"] = {
                             {"type", "boolean"},
                             {"description", "false when nothing was running"}};
                         return s;
                       }(),
                       SessionInterrupt});
  tools.push_back(
      Tool{"session_close",
           "Tear a session down (verified) and remove its workspace, unless "
           "keep_workspace.",
           Input({{"id", Schema(kSessionId)}, {"keep_workspace", {{"type", "boolean"}}}}, {"id"}),
           Schema(kBrief), SessionClose});
  tools.push_back(Tool{
      "session_list",
      "The sessions of this server, by id: those not closed unless state says "
      "which states to list, a page at a time (next, when given, is the after of the "
      "next page).",
      Input({{"kind", {{"type", "string"}, {"enum", {"shell", "python"}}}},
             {"state",
              {{"type", "array"},
               {"items", {{"type", "string"}, {"enum", session::kSessionStates}}},
               {"description", "The states to list (default: all but closed)."}}},
             {"after",
              {{"type", "string"},
               {"description", "List the sessions whose id comes after this one."}}},
             {"limit",
              {{"type", "integer"},
               {"minimum", 1},
               {"maximum", session::kMaxListLimit},
               {"description", "The most sessions to list (default: 100)."}}}}),
      [] {
        json s = {
            {"type", "object"},
            {"properties", {{"sessions", {{"type", "array"}}}, {"next", {{"type", "string"}}}}},
            {"required", {"sessions"}}};
        s["properties"]["sessions"]["items"] = Schema(kBrief);
        return s;
      }(),
      SessionList});
  tools.push_back(
      Tool{"file_write",
           "Write a file into a session's workspace (whole, atomically): content as UTF-8 text, or "
           "content_base64 for bytes.",
           Input({{"id", Schema(kSessionId)},
                  {"path", {{"type", "string"}, {"description", "Relative to the workspace."}}},
                  {"content", {{"type", "string"}}},
                  {"content_base64", {{"type", "string"}}}},
                 {"id", "path"}),
           Schema(R"({"type": "object", "properties": {"path": {"type": "string"},
        "size": {"type": "integer"}, "sha256": {"type": "string"}},
        "required": ["path", "size", "sha256"]})"),
           FileWrite});
  tools.push_back(
      Tool{"file_read",
           "Read a file of a session's workspace: content when it is UTF-8, else content_base64; "
           "at most max_bytes (default: the server's --mcp-output-limit).",
           Input({{"id", Schema(kSessionId)},
                  {"path", {{"type", "string"}, {"description", "Relative to the workspace."}}},
                  {"max_bytes", {{"type", "integer"}, {"minimum", 1}}}},
                 {"id", "path"}),
           Schema(R"({"type": "object", "properties": {"path": {"type": "string"},
        "size": {"type": "integer"}, "sha256": {"type": "string"},
        "content": {"type": "string"}, "content_base64": {"type": "string"},
        "truncated": {"type": "boolean"}},
        "required": ["path", "size", "sha256", "truncated"]})"),
           FileRead});
  tools.push_back(Tool{
      "file_list", "List a directory of a session's workspace (default: the workspace itself).",
      Input({{"id", Schema(kSessionId)},
             {"dir", {{"type", "string"}, {"description", "Relative to the workspace."}}}},
            {"id"}),
      Schema(R"({"type": "object", "properties": {"dir": {"type": "string"},
        "entries": {"type": "array", "items": {"type": "object", "properties": {
          "name": {"type": "string"}, "type": {"type": "string"}, "size": {"type": "integer"}}}}},
        "required": ["entries"]})"),
      FileList});
  return tools;
}

}  // namespace

const std::vector<Tool>& Tools() {
  static const std::vector<Tool> tools = MakeTools();
  return tools;
}

const Tool* FindTool(std::string_view name) {
  for (const auto& t : Tools()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

json ToolList() {
  json list = json::array();
  for (const auto& t : Tools()) {
    list.push_back({{"name", t.name},
                    {"description", t.description},
                    {"inputSchema", t.input_schema},
                    {"outputSchema", t.output_schema}});
  }
  return list;
}

json ToolOk(json structured) {
  std::string text = sys::JsonText(structured);
  return {{"content", json::array({{{"type", "text"}, {"text", std::move(text)}}})},
          {"structuredContent", std::move(structured)},
          {"isError", false}};
}

json ToolError(const std::string& message) {
  return {{"content", json::array({{{"type", "text"}, {"text", message}}})}, {"isError", true}};
}

}  // namespace cordon::mcp
