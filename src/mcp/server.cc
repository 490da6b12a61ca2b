#include "mcp/server.h"

#include "api/log.h"

#ifndef CORDON_VERSION
#define CORDON_VERSION "dev"
#endif

namespace cordon::mcp {

using nlohmann::json;

bool SupportedVersion(std::string_view version) {
  for (auto v : kProtocolVersions) {
    if (v == version) return true;
  }
  return false;
}

void Server::HandleText(Connection& connection, std::string_view text, Reply reply) {
  auto message = Parse(text);
  if (!message) return reply(ErrorResponse(message.error()));
  Handle(connection, *message, std::move(reply));
}

void Server::Handle(Connection& c, const Message& m, Reply reply) {
  if (m.kind == Message::Kind::kResponse) return;  // cordon sends no requests yet
  if (m.kind == Message::Kind::kNotification) {
    if (m.method == "notifications/initialized") c.initialized = true;
    // Others (notifications/cancelled, ...) are not acted on yet.
    return;
  }
  auto fail = [&](int code, std::string message) {
    reply(ErrorResponse(RpcError{code, std::move(message), m.id}));
  };
  if (m.method == "ping") return reply(Response(m.id, json::object()));
  if (m.method == "initialize") return Initialize(c, m, reply);
  if (!c.initialize_answered) {
    return fail(kInvalidRequest, m.method +
                                     ": the connection is not initialized: send "
                                     "initialize first");
  }
  if (m.method == "tools/list") {
    // One page: the table is short (params.cursor is ignored).
    return reply(Response(m.id, {{"tools", ToolList()}}));
  }
  if (m.method == "tools/call") return CallTool(m, std::move(reply));
  fail(kMethodNotFound, "method not found: " + m.method +
                            " (this server has initialize, ping, tools/list and tools/call)");
}

void Server::Initialize(Connection& c, const Message& m, const Reply& reply) {
  auto fail = [&](std::string message) {
    reply(ErrorResponse(RpcError{kInvalidParams, std::move(message), m.id}));
  };
  if (c.initialize_answered) {
    return reply(ErrorResponse(
        RpcError{kInvalidRequest, "initialize: this connection is already initialized", m.id}));
  }
  const json& p = m.params;
  if (!p.is_object() || !p.contains("protocolVersion") || !p["protocolVersion"].is_string()) {
    return fail("params.protocolVersion: is required (a string such as \"2025-11-25\")");
  }
  if (p.contains("capabilities") && !p["capabilities"].is_object()) {
    return fail("params.capabilities: must be an object");
  }
  const std::string asked = p["protocolVersion"].get<std::string>();
  c.protocol_version = SupportedVersion(asked) ? asked : std::string(kProtocolVersions[0]);
  c.client_info = p.value("clientInfo", json::object());
  c.initialize_answered = true;
  api::Log("info", "mcp_initialize",
           {{"client", c.client_info}, {"asked", asked}, {"protocol_version", c.protocol_version}});
  reply(Response(
      m.id,
      {{"protocolVersion", c.protocol_version},
       {"capabilities", {{"tools", {{"listChanged", false}}}}},
       {"serverInfo", {{"name", "cordon"}, {"version", CORDON_VERSION}}},
       {"instructions",
        "cordon runs commands in sandboxes whose every bound is observed. run: one command in a "
        "fresh sandbox. session_create, session_exec: a shell or python session that keeps its "
        "state and workspace between calls; file_write, file_read, file_list: that workspace's "
        "files. A command that ran is never an error: read exit_code, timed_out, outcome."}}));
}

void Server::CallTool(const Message& m, Reply reply) {
  const json& p = m.params;
  auto fail = [&](std::string message) {
    reply(ErrorResponse(RpcError{kInvalidParams, std::move(message), m.id}));
  };
  if (!p.is_object() || !p.contains("name") || !p["name"].is_string()) {
    return fail("params.name: is required: the tool's name (see tools/list)");
  }
  const std::string name = p["name"].get<std::string>();
  const Tool* tool = FindTool(name);
  if (!tool) {
    std::string known;
    for (const auto& t : Tools()) known += (known.empty() ? "" : ", ") + t.name;
    return fail("unknown tool: " + name + " (tools: " + known + ")");
  }
  json arguments = p.value("arguments", json::object());
  if (arguments.is_null()) arguments = json::object();
  if (!arguments.is_object()) return fail("params.arguments: must be an object");
  tool->call(engine_, arguments, [reply = std::move(reply), id = m.id](json result) {
    reply(Response(id, std::move(result)));
  });
}

}  // namespace cordon::mcp
