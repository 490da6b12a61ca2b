#include "gateway/sessions_api.h"

#include <utility>

#include "api/url.h"
#include "gateway/jupyter_errors.h"
#include "jupyter/wire.h"
#include "session/sessions.h"

namespace cordon::gateway {
namespace {

using api::ApiError;
using nlohmann::json;
namespace http = api::http;

// Bounds of what a client may store per session (the store keeps them).
constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxNameBytes = 4096;
constexpr size_t kMaxTypeBytes = 64;
constexpr size_t kMaxKernelIdBytes = 128;

ApiError StoreError(const sys::Error& error) {
  return JupyterError(500, "the session store failed: " + error.message());
}

ApiError NotFound(const std::string& id) {
  return JupyterError(
      404, "Session not found: session_id=" + id + " (GET /api/sessions lists the sessions)");
}

// A text field: absent or null is nullopt; otherwise a string of at most
// `max` bytes without NUL (SQLite would keep it, but a C string of it
// elsewhere would silently end early), non-empty when `non_empty`.
std::expected<std::optional<std::string>, ApiError> Text(const json& body, const char* field,
                                                         size_t max, bool non_empty) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  const std::string name = field;
  if (!it->is_string()) return std::unexpected(JupyterError(400, name + ": must be a string"));
  std::string value = it->get<std::string>();
  if (value.size() > max) {
    return std::unexpected(
        JupyterError(400, name + ": is longer than " + std::to_string(max) + " bytes"));
  }
  if (value.find('\0') != std::string::npos) {
    return std::unexpected(JupyterError(400, name + ": contains a NUL byte"));
  }
  if (non_empty && value.empty()) {
    return std::unexpected(JupyterError(400, name + ": must not be empty"));
  }
  return value;
}

std::expected<json, ApiError> Body(const api::Request& request) {
  const std::string& text = request.message.body();
  if (text.empty()) {
    return std::unexpected(JupyterError(400,
                                        "No JSON data provided: the body must be a JSON "
                                        "object such as {\"path\", \"type\", \"kernel\"}"));
  }
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return std::unexpected(JupyterError(400, "the body must be a JSON object"));
  }
  return body;
}

}  // namespace

struct SessionsApi::Wanted {
  std::optional<std::string> path;
  std::optional<std::string> name;
  std::optional<std::string> type;
  std::optional<std::string> kernel_id;  // bind this kernel
  bool new_kernel = false;               // start one
};

namespace {

// Checks a POST (`create`) or PATCH body; nothing is changed before it
// passes. Unknown fields are ignored, as jupyter-server does (JupyterLab
// sends back models it was given).
std::expected<SessionsApi::Wanted, ApiError> Parse(json body, bool create) {
  SessionsApi::Wanted w;
  // The deprecated form {"notebook": {"path"}} (jupyter-server still takes it).
  if (body.contains("notebook") && !body["notebook"].is_null()) {
    const json& notebook = body["notebook"];
    if (!notebook.is_object()) {
      return std::unexpected(JupyterError(400, "notebook: must be an object {\"path\"}"));
    }
    const char* from = create && notebook.contains("name") ? "name" : "path";
    if (notebook.contains(from)) {
      body["path"] = notebook[from];
      body["type"] = "notebook";
    }
  }
  auto path = Text(body, "path", kMaxPathBytes, true);
  if (!path) return std::unexpected(path.error());
  auto name = Text(body, "name", kMaxNameBytes, false);
  if (!name) return std::unexpected(name.error());
  auto type = Text(body, "type", kMaxTypeBytes, true);
  if (!type) return std::unexpected(type.error());
  w.path = *path;
  w.name = *name;
  w.type = *type;
  if (create && !w.path) {
    return std::unexpected(JupyterError(
        400, "path: is required (a notebook's path, or any name unique to the session)"));
  }
  if (create && !w.type) {
    return std::unexpected(
        JupyterError(400, "type: is required (\"notebook\", \"console\" or \"file\")"));
  }
  auto kernel = body.find("kernel");
  if (kernel == body.end() || kernel->is_null()) {
    w.new_kernel = create;  // POST: the default kernel; PATCH: no change
    return w;
  }
  if (!kernel->is_object()) {
    return std::unexpected(JupyterError(
        400, "kernel: must be an object, {\"id\"} of a kernel or {\"name\": \"python3\"}"));
  }
  auto kernel_id = Text(*kernel, "id", kMaxKernelIdBytes, true);
  if (!kernel_id) {
    ApiError e = kernel_id.error();
    e.message = "kernel." + e.message;
    return std::unexpected(e);
  }
  auto kernel_name = Text(*kernel, "name", kMaxNameBytes, true);
  if (!kernel_name) {
    ApiError e = kernel_name.error();
    e.message = "kernel." + e.message;
    return std::unexpected(e);
  }
  // The id takes precedence over the name, as in jupyter-server.
  if (*kernel_id) {
    w.kernel_id = *kernel_id;
  } else if (*kernel_name || create) {
    if (*kernel_name && **kernel_name != kSpecName) {
      return std::unexpected(JupyterError(
          404, "kernel.name: No such kernel named " + **kernel_name + " (known: python3)"));
    }
    w.new_kernel = true;
  } else {
    return std::unexpected(JupyterError(
        400, "kernel: give \"id\" (a kernel to bind) or \"name\" (\"python3\", to start one)"));
  }
  return w;
}

}  // namespace

void SessionsApi::Attach(session::Sessions& sessions, KernelHooks kernels) {
  sessions_ = &sessions;
  kernels_ = std::move(kernels);
}

bool SessionsApi::Owns(const std::vector<std::string>& segments) {
  return segments.size() >= 2 && segments[0] == "api" && segments[1] == "sessions";
}

void SessionsApi::Handle(const api::Request& request, const std::vector<std::string>& seg,
                         const std::shared_ptr<api::Exchange>& ex) {
  const http::verb method = request.message.method();
  auto not_allowed = [&](const char* allow) {
    ex->RespondJson(405,
                    api::ToJson(JupyterError(405, std::string(request.message.method_string()) +
                                                      " is not allowed on " + request.path +
                                                      " (allowed: " + allow + ")")),
                    {{"Allow", allow}});
  };
  if (seg.size() == 2) {
    if (method == http::verb::get) {
      auto all = List();
      if (!all) return ex->RespondError(StoreError(all.error()));
      json list = json::array();
      for (const Live& live : *all) list.push_back(Model(live));
      return ex->RespondJson(200, list);
    }
    if (method != http::verb::post) return not_allowed("GET, POST");
    auto body = Body(request);
    if (!body) return ex->RespondError(body.error());
    auto wanted = Parse(std::move(*body), /*create=*/true);
    if (!wanted) return ex->RespondError(wanted.error());
    return Create(std::move(*wanted), ex);
  }
  if (seg.size() == 3) {
    const std::string id = api::PercentDecode(seg[2]);
    if (method == http::verb::get) {
      auto found = Find(id);
      if (!found) return ex->RespondError(StoreError(found.error()));
      if (!*found) return ex->RespondError(NotFound(id));
      return ex->RespondJson(200, Model(**found));
    }
    if (method == http::verb::patch) {
      auto body = Body(request);
      if (!body) return ex->RespondError(body.error());
      auto wanted = Parse(std::move(*body), /*create=*/false);
      if (!wanted) return ex->RespondError(wanted.error());
      return Update(id, std::move(*wanted), ex);
    }
    if (method == http::verb::delete_) return Remove(id, ex);
    return not_allowed("GET, PATCH, DELETE");
  }
  ex->RespondError(JupyterError(404, "no such endpoint: " + request.path));
}

sys::Result<std::vector<SessionsApi::Live>> SessionsApi::List() {
  CORDON_ASSIGN_OR_RETURN(std::vector<store::JupyterSessionRecord> rows,
                          store_.ListJupyterSessions());
  std::vector<Live> out;
  out.reserve(rows.size());
  for (store::JupyterSessionRecord& row : rows) {
    // A kernel whose record cannot be read fails the list: its session is
    // not dropped as if the kernel were gone.
    CORDON_ASSIGN_OR_RETURN(std::optional<json> kernel, kernels_.model(row.kernel_id));
    if (!kernel) {
      // The kernel was shut down without its session (DELETE /api/kernels,
      // a clean daemon stop): the session is over, as in jupyter-server.
      CORDON_RETURN_IF_ERROR(store_.DeleteJupyterSession(row.id));
      continue;
    }
    out.push_back(Live{std::move(row), std::move(*kernel)});
  }
  return out;
}

sys::Result<std::optional<SessionsApi::Live>> SessionsApi::Find(const std::string& id) {
  CORDON_ASSIGN_OR_RETURN(std::vector<Live> all, List());
  for (Live& live : all) {
    if (live.record.id == id) return std::optional<Live>(std::move(live));
  }
  return std::optional<Live>();
}

json SessionsApi::Model(const Live& live) const {
  const store::JupyterSessionRecord& r = live.record;
  json model = {
      {"id", r.id}, {"path", r.path}, {"name", r.name}, {"type", r.type}, {"kernel", live.kernel}};
  // The deprecated form, which jupyter-server still gives notebooks.
  if (r.type == "notebook") model["notebook"] = {{"path", r.path}, {"name", r.name}};
  return model;
}

void SessionsApi::Create(Wanted wanted, const std::shared_ptr<api::Exchange>& ex) {
  const std::string path = *wanted.path;
  if (auto waiting = creating_.find(path); waiting != creating_.end()) {
    waiting->second.push_back([this, wanted, ex] { Create(wanted, ex); });
    return;
  }
  auto all = List();
  if (!all) return ex->RespondError(StoreError(all.error()));
  auto respond = [ex](const json& model) {
    ex->RespondJson(201, model,
                    {{"Location", "/api/sessions/" + model.value("id", std::string())}});
  };
  // A path that has a session answers that session, whatever else was asked
  // (jupyter-server: "unless a session already exists for the named session").
  for (const Live& live : *all) {
    if (live.record.path == path) return respond(Model(live));
  }
  const size_t max_sessions = kSessionsPerKernel * max_kernels_;
  if (all->size() >= max_sessions) {
    return ex->RespondError(JupyterError(
        403,
        "at most " + std::to_string(max_sessions) + " sessions may exist at once (" +
            std::to_string(kSessionsPerKernel) + " times --max-kernels); delete one first",
        "Resource Limit"));
  }
  // Writes the row for kernel `kernel_id` and answers it.
  auto bind = [this, wanted, respond](const std::string& kernel_id) -> std::optional<ApiError> {
    auto kernel = kernels_.model(kernel_id);
    if (!kernel) return StoreError(kernel.error());
    if (!*kernel) return JupyterError(400, "kernel.id: no kernel " + kernel_id + " exists");
    store::JupyterSessionRecord r;
    r.id = jupyter::NewUuid();
    r.path = *wanted.path;
    r.name = wanted.name.value_or("");
    r.type = *wanted.type;
    r.kernel_id = kernel_id;
    r.created_at_ms = store::NowMs();
    r.updated_at_ms = r.created_at_ms;
    if (auto put = store_.PutJupyterSession(r); !put) return StoreError(put.error());
    kernels_.touch(kernel_id);
    respond(Model(Live{std::move(r), std::move(**kernel)}));
    return std::nullopt;
  };
  if (wanted.kernel_id) {
    if (auto e = bind(*wanted.kernel_id)) ex->RespondError(*e);
    return;
  }
  creating_[path];
  StartKernel([this, path, ex, bind](std::expected<std::string, ApiError> started) {
    std::vector<std::function<void()>> waiters;
    if (auto it = creating_.find(path); it != creating_.end()) {
      waiters = std::move(it->second);
      creating_.erase(it);
    }
    if (!started) {
      ex->RespondError(started.error());
    } else if (auto e = bind(*started)) {
      // The row could not be written: the kernel would belong to no one.
      StopKernel(*started, [ex, e](std::optional<ApiError>) { ex->RespondError(*e); });
    }
    for (auto& waiter : waiters) waiter();
  });
}

void SessionsApi::Update(const std::string& id, Wanted wanted,
                         const std::shared_ptr<api::Exchange>& ex) {
  auto found = Find(id);
  if (!found) return ex->RespondError(StoreError(found.error()));
  if (!*found) return ex->RespondError(NotFound(id));
  store::JupyterSessionRecord record = (*found)->record;
  if (wanted.path) record.path = *wanted.path;
  if (wanted.name) record.name = *wanted.name;
  if (wanted.type) record.type = *wanted.type;
  // Writes the changed row with kernel `kernel_id`; the kernel it replaces is
  // shut down before the answer (jupyter-server waits for it too).
  auto finish = [this, ex, record](const std::string& kernel_id) mutable {
    const std::string before = record.kernel_id;
    record.kernel_id = kernel_id;
    record.updated_at_ms = store::NowMs();
    if (auto put = store_.PutJupyterSession(record); !put) {
      return ex->RespondError(StoreError(put.error()));
    }
    auto answer = [this, ex, id = record.id](std::optional<ApiError>) {
      // The old kernel's shutdown is the kernels API's concern from here
      // (a quarantined one stays listed there, with its problem); the
      // session has changed either way.
      auto now = Find(id);
      if (!now) return ex->RespondError(StoreError(now.error()));
      if (!*now) return ex->RespondError(NotFound(id));
      ex->RespondJson(200, Model(**now));
    };
    if (before == kernel_id) return answer(std::nullopt);
    kernels_.touch(kernel_id);
    StopKernel(before, answer);
  };
  if (wanted.kernel_id) {
    auto kernel = kernels_.model(*wanted.kernel_id);
    if (!kernel) return ex->RespondError(StoreError(kernel.error()));
    if (!*kernel) {
      return ex->RespondError(
          JupyterError(400, "kernel.id: no kernel " + *wanted.kernel_id + " exists"));
    }
    return finish(*wanted.kernel_id);
  }
  if (!wanted.new_kernel) return finish(record.kernel_id);
  StartKernel([ex, finish](std::expected<std::string, ApiError> started) mutable {
    if (!started) return ex->RespondError(started.error());
    finish(*started);
  });
}

void SessionsApi::Remove(const std::string& id, const std::shared_ptr<api::Exchange>& ex) {
  auto found = Find(id);
  if (!found) return ex->RespondError(StoreError(found.error()));
  if (!*found) return ex->RespondError(NotFound(id));
  StopKernel((*found)->record.kernel_id, [this, id, ex](std::optional<ApiError> error) {
    // A kernel whose teardown could not be verified keeps its session, so
    // that the client sees why and may try again.
    if (error) return ex->RespondError(*error);
    if (auto gone = store_.DeleteJupyterSession(id); !gone) {
      return ex->RespondError(StoreError(gone.error()));
    }
    ex->Respond(204, "", "");
  });
}

void SessionsApi::StartKernel(std::function<void(std::expected<std::string, ApiError>)> done) {
  if (auto over = OverKernelLimit(*sessions_, max_kernels_)) {
    return done(std::unexpected(std::move(*over)));
  }
  // As POST /api/kernels without env: such a request may take a warm
  // kernel from the pool (one that declares env may not).
  session::CreateRequest create;
  create.kind = "python";
  create.id = jupyter::NewUuid();
  // Answered once: when the kernel is `starting`, or when the create is
  // (a warm kernel, or a failure).
  auto answered = std::make_shared<bool>(false);
  auto shared = std::make_shared<decltype(done)>(std::move(done));
  create.on_starting = [answered, shared](const json& session) {
    if (!std::exchange(*answered, true)) (*shared)(session.value("id", std::string()));
  };
  sessions_->CreateSession(std::move(create),
                           [answered, shared](session::Outcome<session::Sessions::Created> r) {
                             if (std::exchange(*answered, true)) return;
                             if (!r) return (*shared)(std::unexpected(FromSession(r.error())));
                             (*shared)(r->session.value("id", std::string()));
                           });
}

void SessionsApi::StopKernel(const std::string& kernel_id,
                             std::function<void(std::optional<ApiError>)> done) {
  auto kernel = kernels_.model(kernel_id);
  if (!kernel) return done(StoreError(kernel.error()));
  if (!*kernel) return done(std::nullopt);  // already gone
  sessions_->Delete(kernel_id, false, [this, kernel_id, done](session::Outcome<json> r) {
    if (!r && r.error().kind != session::Error::Kind::kNotFound) {
      return done(FromSession(r.error()));
    }
    kernels_.forget(kernel_id);
    done(std::nullopt);
  });
}

}  // namespace cordon::gateway
