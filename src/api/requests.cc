#include "api/requests.h"

#include <limits>
#include <set>

#include "sys/text.h"

namespace cordon::api {
namespace {

using nlohmann::json;

std::unexpected<ApiError> Bad(const std::string& field, const std::string& message) {
  return std::unexpected(Invalid(field, field + ": " + message));
}

Parsed<void> OnlyKnown(const json& object, const std::set<std::string>& known,
                       const std::string& prefix) {
  for (const auto& [key, value] : object.items()) {
    if (!known.contains(key)) {
      return Bad(prefix + key, "unknown field (known: " + sys::JoinNames(known) + ")");
    }
  }
  return {};
}

Parsed<std::optional<int64_t>> Int(const json& object, const std::string& key,
                                   const std::string& field) {
  if (!object.contains(key) || object[key].is_null()) return std::nullopt;
  const json& v = object[key];
  if (!v.is_number_integer()) return Bad(field, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
    return Bad(field, "is too large");
  }
  return v.get<int64_t>();
}

Parsed<std::optional<std::string>> String(const json& object, const std::string& key) {
  if (!object.contains(key) || object[key].is_null()) return std::nullopt;
  if (!object[key].is_string()) return Bad(key, "must be a string");
  return object[key].get<std::string>();
}

Parsed<bool> Bool(const json& object, const std::string& key) {
  if (!object.contains(key) || object[key].is_null()) return false;
  if (!object[key].is_boolean()) return Bad(key, "must be true or false");
  return object[key].get<bool>();
}

Parsed<void> Env(const json& body, contain::Spec& spec) {
  if (!body.contains("env") || body["env"].is_null()) return {};
  if (!body["env"].is_object()) return Bad("env", "must be an object of NAME: \"value\"");
  for (const auto& [name, value] : body["env"].items()) {
    if (!value.is_string()) return Bad("env", "the value of " + name + " must be a string");
    spec.env.emplace_back(name, value.get<std::string>());
  }
  return {};
}

Parsed<void> Limits(const json& body, contain::Limits& l) {
  if (!body.contains("limits") || body["limits"].is_null()) return {};
  const json& limits = body["limits"];
  if (!limits.is_object()) return Bad("limits", "must be an object");
  const std::set<std::string> known = {
      "timeout_ms",  "grace_ms",        "output_limit_bytes", "memory_bytes",        "pids",
      "cpu_seconds", "file_size_bytes", "open_files",         "address_space_bytes", "cpu",
      "disk_bytes",  "disk_inodes"};
  CORDON_RETURN_IF_ERROR(OnlyKnown(limits, known, "limits."));
  struct Field {
    const char* name;
    std::optional<int64_t>* optional;
    int64_t* required;
  };
  const Field fields[] = {
      {"timeout_ms", &l.timeout_ms, nullptr},
      {"grace_ms", nullptr, &l.grace_ms},
      {"output_limit_bytes", nullptr, &l.output_limit_bytes},
      {"memory_bytes", &l.memory_bytes, nullptr},
      {"pids", &l.pids, nullptr},
      {"cpu_seconds", &l.cpu_seconds, nullptr},
      {"file_size_bytes", &l.file_size_bytes, nullptr},
      {"open_files", &l.open_files, nullptr},
      {"address_space_bytes", &l.address_space_bytes, nullptr},
      {"disk_bytes", &l.disk_bytes, nullptr},
      {"disk_inodes", &l.disk_inodes, nullptr},
  };
  for (const Field& f : fields) {
    CORDON_ASSIGN_OR_RETURN(auto value, Int(limits, f.name, std::string("limits.") + f.name));
    if (!value) continue;
    if (f.optional) *f.optional = *value;
    if (f.required) *f.required = *value;
  }
  if (limits.contains("cpu") && !limits["cpu"].is_null()) {
    if (!limits["cpu"].is_number()) return Bad("limits.cpu", "must be a number of CPUs");
    l.cpu = limits["cpu"].get<double>();
  }
  return {};
}

Parsed<void> Require(const json& body, contain::Spec& spec) {
  if (!body.contains("require") || body["require"].is_null()) return {};
  if (!body["require"].is_array()) return Bad("require", "must be an array of capability names");
  for (const auto& name : body["require"]) {
    auto cap = name.is_string() ? contain::ParseCapability(name.get<std::string>()) : std::nullopt;
    if (!cap) {
      return Bad("require", "unknown capability " + name.dump() + " (known: " +
                                sys::JoinNames(contain::kAllCapabilities |
                                               std::views::transform(contain::CapabilityName)) +
                                ")");
    }
    spec.required.insert(*cap);
  }
  return {};
}

// env, limits, require, permissive, isolation: what runs and sessions share.
Parsed<void> Common(const json& body, contain::Spec& spec) {
  CORDON_RETURN_IF_ERROR(Env(body, spec));
  CORDON_RETURN_IF_ERROR(Limits(body, spec.limits));
  CORDON_RETURN_IF_ERROR(Require(body, spec));
  CORDON_ASSIGN_OR_RETURN(spec.permissive, Bool(body, "permissive"));
  if (body.contains("isolation")) CORDON_RETURN_IF_ERROR(ApplyIsolation(body["isolation"], spec));
  return {};
}

Parsed<std::string> Base64(const std::string& text) {
  auto decoded = sys::Base64Decode(text);
  if (!decoded) return Bad("stdin_b64", "is not valid base64");
  return std::move(*decoded);
}

}  // namespace

Parsed<void> ApplyIsolation(const json& value, contain::Spec& spec) {
  if (value.is_null()) return {};
  const char* kShape =
      "must be a level (\"none\", \"standard\", \"strict\") or an object {\"level\", "
      "\"network\": \"none\" | \"host\"}";
  auto level = [&](const json& v, const std::string& field) -> Parsed<void> {
    if (!v.is_string()) return Bad(field, kShape);
    auto parsed = contain::ParseIsolation(v.get<std::string>());
    if (!parsed) return Bad(field, "\"" + v.get<std::string>() + "\" is not a level: " + kShape);
    spec.isolation.level = *parsed;
    return {};
  };
  if (value.is_string()) return level(value, "isolation");
  if (!value.is_object()) return Bad("isolation", kShape);
  CORDON_RETURN_IF_ERROR(OnlyKnown(value, {"level", "network"}, "isolation."));
  if (value.contains("level")) CORDON_RETURN_IF_ERROR(level(value["level"], "isolation.level"));
  if (value.contains("network")) {
    const json& n = value["network"];
    auto network = n.is_string() ? contain::ParseNetwork(n.get<std::string>()) : std::nullopt;
    if (!network) return Bad("isolation.network", "must be \"none\" or \"host\"");
    spec.isolation.network = *network;
  }
  return {};
}

Parsed<json> ParseObject(std::string_view body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::unexpected(Invalid("", "the body is not valid JSON"));
  if (!parsed.is_object()) return std::unexpected(Invalid("", "the body must be a JSON object"));
  return parsed;
}

Parsed<contain::Spec> ParseRun(const json& body) {
  CORDON_RETURN_IF_ERROR(OnlyKnown(body,
                                   {"argv", "shell", "env", "stdin", "stdin_b64", "workspace",
                                    "require", "isolation", "permissive", "owner", "limits"},
                                   ""));
  contain::Spec spec;
  if (body.contains("argv") && !body["argv"].is_null()) {
    if (!body["argv"].is_array()) return Bad("argv", "must be an array of strings");
    for (const auto& a : body["argv"]) {
      if (!a.is_string()) return Bad("argv", "must be an array of strings");
      spec.argv.push_back(a.get<std::string>());
    }
  }
  CORDON_ASSIGN_OR_RETURN(spec.shell, String(body, "shell"));
  CORDON_ASSIGN_OR_RETURN(auto workspace, String(body, "workspace"));
  if (workspace) {
    if (!workspace->starts_with("/")) return Bad("workspace", "must be an absolute path");
    spec.workspace = *workspace;
  }
  CORDON_ASSIGN_OR_RETURN(spec.stdin_bytes, String(body, "stdin"));
  CORDON_ASSIGN_OR_RETURN(auto b64, String(body, "stdin_b64"));
  if (b64) {
    if (spec.stdin_bytes) return Bad("stdin_b64", "give either stdin or stdin_b64, not both");
    CORDON_ASSIGN_OR_RETURN(spec.stdin_bytes, Base64(*b64));
  }
  CORDON_ASSIGN_OR_RETURN(auto owner, String(body, "owner"));
  spec.owner = owner.value_or("api");
  CORDON_RETURN_IF_ERROR(Common(body, spec));
  return spec;
}

Parsed<session::CreateRequest> ParseSession(const json& body) {
  CORDON_RETURN_IF_ERROR(OnlyKnown(body,
                                   {"id", "kind", "env", "limits", "isolation", "ttl_s",
                                    "fresh_workspace", "require", "permissive"},
                                   ""));
  session::CreateRequest r;
  CORDON_ASSIGN_OR_RETURN(r.id, String(body, "id"));
  CORDON_ASSIGN_OR_RETURN(auto kind, String(body, "kind"));
  if (kind && *kind != "shell" && *kind != "python") {
    return Bad("kind", "\"" + *kind + "\" is not a session kind (\"shell\" or \"python\")");
  }
  r.kind = kind.value_or("shell");
  CORDON_ASSIGN_OR_RETURN(r.ttl_s, Int(body, "ttl_s", "ttl_s"));
  if (r.ttl_s && *r.ttl_s <= 0) return Bad("ttl_s", "must be a positive number of seconds");
  if (r.ttl_s && *r.ttl_s > 365LL * 24 * 3600) return Bad("ttl_s", "must be at most a year");
  CORDON_ASSIGN_OR_RETURN(r.fresh_workspace, Bool(body, "fresh_workspace"));
  if (body.contains("isolation") && body["isolation"].is_string()) {
    r.isolation = body["isolation"].get<std::string>();  // checked by ApplyIsolation below
  }
  CORDON_RETURN_IF_ERROR(Common(body, r.spec));
  return r;
}

Parsed<session::ExecCall> ParseExec(const json& body) {
  CORDON_RETURN_IF_ERROR(OnlyKnown(body, {"command", "code", "timeout_ms", "stdin"}, ""));
  session::ExecCall call;
  CORDON_ASSIGN_OR_RETURN(auto command, String(body, "command"));
  CORDON_ASSIGN_OR_RETURN(auto code, String(body, "code"));
  if (command && code) return Bad("code", "give either command (shell) or code (python), not both");
  // A python session's code may be empty (a valid, empty execution).
  if (!code && (!command || command->empty())) {
    return Bad("command", "is required and must not be empty (python sessions take code)");
  }
  call.command = std::move(code ? *code : *command);
  CORDON_ASSIGN_OR_RETURN(call.timeout_ms, Int(body, "timeout_ms", "timeout_ms"));
  if (auto e = contain::ValidateTimeoutMs("timeout_ms", call.timeout_ms)) {
    return Bad(e->field, e->reason);
  }
  CORDON_ASSIGN_OR_RETURN(call.stdin_bytes, String(body, "stdin"));
  return call;
}

}  // namespace cordon::api
