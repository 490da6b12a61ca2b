#include "gateway/gateway.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <utility>

#include "api/url.h"
#include "gateway/channels.h"
#include "gateway/jupyter_errors.h"
#include "gateway/sessions_api.h"
#include "jupyter/kernel_client.h"
#include "jupyter/wire.h"
#include "session/kernel.h"
#include "session/sessions.h"

#ifndef CORDON_VERSION
#define CORDON_VERSION "dev"
#endif

namespace cordon::gateway {
namespace {

using api::ApiError;
using api::Exchange;
using api::Request;
using nlohmann::json;
namespace http = api::http;

json KernelSpec() {
  return {{"name", kSpecName},
          {"spec",
           {{"argv", {"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"}},
            {"display_name", "Python 3 (cordon)"},
            {"language", "python"},
            {"interrupt_mode", "signal"},
            {"env", json::object()},
            {"metadata", {{"cordon", {{"contained", true}}}}}}},
          {"resources", json::object()}};
}

class Gateway final : public api::Extension {
 public:
  Gateway(api::GatewayOptions options, api::ExtensionServices& services)
      : options_(std::move(options)), relay_(options_.max_message_bytes) {
    session::KernelContext context;
    context.reactor = &services.reactor;
    context.store = &services.store;
    context.signaller = &services.signaller;
    context.probe = &services.probe;
    context.zmq = &zmq_;
    // Short paths (unix sockets take at most 107 bytes), in a place a
    // sandbox's root can traverse to bind its own directory: /run for root
    // (one directory per state directory, so daemons do not share), the
    // state directory otherwise (an unprivileged sandbox is the caller).
    context.runtime_root = services.state_dir + "/k";
    if (::geteuid() == 0) {
      char name[32];
      std::snprintf(name, sizeof name, "/run/cordon/k-%016zx",
                    std::hash<std::string>{}(services.state_dir));
      context.runtime_root = name;  // made, with its parents, by MakeKernelFactory
    }
    context.verify_timeout = services.verify_timeout;
    context.interrupt_grace = options_.interrupt_grace;
    context.ready_timeout = options_.kernel_ready_timeout;
    context.max_message_bytes =
        std::max(static_cast<int64_t>(options_.max_message_bytes), session::kMinKernelMessageBytes);
    context.listener = &relay_;
    runtime_root_ = context.runtime_root;
    services.python = session::MakeKernelFactory(context);
    sessions_api_ = std::make_unique<SessionsApi>(services.store, options_.max_kernels);
  }
  // After the sessions (the daemon destroys them first): no kernel is left
  // to use its directory.
  ~Gateway() override {
    std::error_code ec;
    std::filesystem::remove_all(runtime_root_, ec);
  }

  void Attach(session::Sessions& sessions) override {
    sessions_ = &sessions;
    relay_.Attach(sessions);
    // /api/sessions binds paths to the kernels of this API (sessions_api.h).
    KernelHooks hooks;
    hooks.model = [this](const std::string& id) -> sys::Result<std::optional<json>> {
      auto view = sessions_->Get(id);
      if (view) return Model(*view);
      if (view.error().kind == session::Error::Kind::kNotFound) return std::nullopt;
      return sys::Fail(view.error().message);
    };
    hooks.touch = [this](const std::string& id) { relay_.Touch(id); };
    hooks.forget = [this](const std::string& id) { relay_.Forget(id); };
    sessions_api_->Attach(sessions, std::move(hooks));
  }

  void Stop() override { relay_.CloseAll(); }

  bool Owns(const std::string& path) const override {
    return path == "/api" || path.starts_with("/api/");
  }

  bool Handle(const Request& request, const std::shared_ptr<Exchange>& ex) override {
    if (!Owns(request.path)) return false;
    const http::verb method = request.message.method();
    std::vector<std::string> seg = api::Segments(request.path);
    auto not_allowed = [&](const char* allow) {
      ApiError e = JupyterError(
          405, std::string(request.message.method_string()) + " is not allowed on " + request.path);
      ex->RespondJson(405, api::ToJson(e), {{"Allow", allow}});
    };
    auto is = [&](std::initializer_list<const char*> want) {
      return api::SegmentsMatch(seg, want);
    };
    if (SessionsApi::Owns(seg)) return sessions_api_->Handle(request, seg, ex), true;
    if (is({"api"})) {
      if (method != http::verb::get) return not_allowed("GET"), true;
      ex->RespondJson(200, {{"version", CORDON_VERSION}, {"server", "cordon"}});
      return true;
    }
    if (is({"api", "kernelspecs"})) {
      if (method != http::verb::get) return not_allowed("GET"), true;
      ex->RespondJson(200, {{"default", kSpecName}, {"kernelspecs", {{kSpecName, KernelSpec()}}}});
      return true;
    }
    if (is({"api", "kernelspecs", "*"})) {
      if (method != http::verb::get) return not_allowed("GET"), true;
      if (api::PercentDecode(seg[2]) != kSpecName) {
        ex->RespondError(JupyterError(404, "Kernel spec " + seg[2] + " not found"));
      } else {
        ex->RespondJson(200, KernelSpec());
      }
      return true;
    }
    if (is({"api", "kernels"})) {
      if (method == http::verb::get) {
        // A kernel being shut down is not listed: a client that listed
        // while its DELETE was under way would see it after the 204
        // (JupyterLab's KernelManager answers a refresh asked for meanwhile
        // with that listing).
        sessions_->List<json>(
            session::ListFilter{.kind = "python", .except = {"closed"}, .closing = false},
            [](session::Listing all) { return std::move(all.sessions); },
            [this, ex](session::Outcome<json> all) {
              if (!all) return ex->RespondError(FromSession(all.error()));
              json list = json::array();
              for (const json& s : *all) {
                if (auto model = Model(s)) list.push_back(*model);
              }
              ex->RespondJson(200, list);
            });
      } else if (method == http::verb::post) {
        Create(request, ex);
      } else {
        not_allowed("GET, POST");
      }
      return true;
    }
    if (seg.size() >= 3 && seg[0] == "api" && seg[1] == "kernels") {
      const std::string id = api::PercentDecode(seg[2]);
      auto view = sessions_->Get(id);
      if (!view && view.error().kind != session::Error::Kind::kNotFound) {
        ex->RespondError(FromSession(view.error()));  // not "does not exist"
        return true;
      }
      std::optional<json> model = view ? Model(*view) : std::nullopt;
      if (!model) {
        ex->RespondError(JupyterError(404, "Kernel does not exist: " + id));
        return true;
      }
      if (seg.size() == 3) {
        if (method == http::verb::get) {
          ex->RespondJson(200, *model);
        } else if (method == http::verb::delete_) {
          sessions_->Delete(id, false, [this, id, ex](session::Outcome<json> r) {
            if (!r) return ex->RespondError(FromSession(r.error()));
            relay_.Forget(id);
            ex->Respond(204, "", "");
          });
        } else {
          not_allowed("GET, DELETE");
        }
        return true;
      }
      if (is({"api", "kernels", "*", "interrupt"})) {
        if (method != http::verb::post) return not_allowed("POST"), true;
        relay_.Touch(id);
        auto interrupted = sessions_->Interrupt(id);
        if (!interrupted) {
          ex->RespondError(FromSession(interrupted.error()));
        } else {
          ex->Respond(204, "", "");
        }
        return true;
      }
      if (is({"api", "kernels", "*", "restart"})) {
        if (method != http::verb::post) return not_allowed("POST"), true;
        relay_.Restarting(id);
        sessions_->Restart(id, [this, id, ex](session::Outcome<json> r) {
          relay_.Restarted(id, r.has_value());
          if (!r) return ex->RespondError(FromSession(r.error()));
          ex->RespondJson(200, Model(*r).value_or(json::object()));
        });
        return true;
      }
      if (is({"api", "kernels", "*", "channels"})) {
        if (method != http::verb::get) return not_allowed("GET"), true;
        if (!api::IsWebSocketUpgrade(request.message)) {
          ex->RespondError(JupyterError(400, "channels: a WebSocket upgrade is required"));
          return true;
        }
        if ((*model)["execution_state"] == "dead") {
          ex->RespondError(JupyterError(404, "Kernel is dead: " + id));
          return true;
        }
        // v1.kernel.websocket.jupyter.org when the client offers it (as
        // jupyter_server prefers it), else the default protocol.
        const auto query = api::ParseQuery(request.query);
        const auto session = query.find("session_id");
        ex->UpgradeWebSocket(
            options_.max_message_bytes,
            [this, id, client_session = session == query.end() ? std::string() : session->second](
                std::shared_ptr<api::WebSocket> socket) {
              relay_.Connect(id, std::move(socket), client_session);
            },
            {std::string(jupyter::kWsProtocolV1)});
        return true;
      }
    }
    ex->RespondError(JupyterError(404, "no such endpoint: " + request.path));
    return true;
  }

 private:
  // The Kernel Gateway's model of a python session; none for other kinds
  // and for closed sessions.
  std::optional<json> Model(const json& session) {
    if (session.value("kind", "") != "python") return std::nullopt;
    const std::string state = session.value("state", "");
    if (state == "closed") return std::nullopt;
    const std::string id = session.value("id", "");
    std::string activity = relay_.last_activity(id);
    if (activity.empty()) activity = jupyter::IsoNow();
    return json{{"id", id},
                {"name", kSpecName},
                {"last_activity", activity},
                {"execution_state", session.value("execution_state", "dead")},
                {"connections", relay_.connections(id)}};
  }

  void Create(const Request& request, const std::shared_ptr<Exchange>& ex) {
    const std::string& text = request.message.body();
    json body = text.empty() ? json::object() : json::parse(text, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return ex->RespondError(JupyterError(400, "the body must be a JSON object"));
    }
    session::CreateRequest create;
    create.kind = "python";
    create.id = jupyter::NewUuid();
    if (body.contains("name") && !body["name"].is_null()) {
      if (!body["name"].is_string()) {
        return ex->RespondError(JupyterError(400, "name: must be a string"));
      }
      if (body["name"] != kSpecName) {
        return ex->RespondError(JupyterError(
            404, "No such kernel named " + body["name"].get<std::string>() + " (known: python3)"));
      }
    }
    if (body.contains("path") && !body["path"].is_null() && !body["path"].is_string()) {
      return ex->RespondError(JupyterError(400, "path: must be a string"));
    }
    if (body.contains("env") && !body["env"].is_null()) {
      if (!body["env"].is_object()) {
        return ex->RespondError(JupyterError(400, "env: must be an object of NAME: \"value\""));
      }
      for (const auto& [name, value] : body["env"].items()) {
        if (!value.is_string()) {
          return ex->RespondError(
              JupyterError(400, "env: the value of " + name + " must be a string"));
        }
        // As the Kernel Gateway: KERNEL_* and the operator's allowlist pass,
        // nothing else (a client's PATH or LD_PRELOAD does not).
        bool allowed = name.starts_with("KERNEL_") &&
                       name.find_first_of("=") == std::string::npos && name.size() > 7;
        for (const auto& a : options_.env_allowlist) allowed |= name == a;
        if (allowed) create.spec.env.emplace_back(name, value.get<std::string>());
      }
    }
    if (auto over = OverKernelLimit(*sessions_, options_.max_kernels)) {
      return ex->RespondError(std::move(*over));
    }
    // 201 as soon as the kernel is started (execution_state "starting", as
    // Jupyter servers answer), or at once with a warm one; messages sent on
    // its channels meanwhile are relayed once it is ready. A kernel that
    // fails to start reads `dead`.
    auto responded = std::make_shared<bool>(false);
    auto respond = [this, ex, responded](const json& session) {
      if (std::exchange(*responded, true)) return;
      json model = Model(session).value_or(json::object());
      relay_.Touch(model.value("id", ""));
      ex->RespondJson(201, model,
                      {{"Location", "/api/kernels/" + model.value("id", std::string())}});
    };
    create.on_starting = respond;
    sessions_->CreateSession(
        std::move(create),
        [ex, responded, respond](session::Outcome<session::Sessions::Created> r) {
          if (!r) {
            if (!std::exchange(*responded, true)) ex->RespondError(FromSession(r.error()));
            return;
          }
          respond(r->session);
        });
  }

  api::GatewayOptions options_;
  std::string runtime_root_;
  jupyter::ZmqContext zmq_;
  Relay relay_;
  session::Sessions* sessions_ = nullptr;
  std::unique_ptr<SessionsApi> sessions_api_;  // /api/sessions; set in the constructor
};

}  // namespace

api::ExtensionMaker Maker(api::GatewayOptions options) {
  return
      [options](api::ExtensionServices& services) -> sys::Result<std::unique_ptr<api::Extension>> {
        return std::unique_ptr<api::Extension>(new Gateway(options, services));
      };
}

}  // namespace cordon::gateway
