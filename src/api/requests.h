// JSON request bodies to library types. Only the shape is checked here
// (types, unknown fields, the isolation level); every rule about the values
// is contain::Validate's and Acquire's, as for the CLI.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/errors.h"
#include "contain/spec.h"
#include "session/sessions.h"

namespace cordon::api {

template <typename T>
using Parsed = std::expected<T, ApiError>;

// The body as a JSON object (400 naming why not).
Parsed<nlohmann::json> ParseObject(std::string_view body);

// POST /v1/runs: {"argv" | "shell", "env", "stdin" | "stdin_b64", "workspace",
// "require", "isolation", "permissive", "owner", "limits": {...}}.
Parsed<contain::Spec> ParseRun(const nlohmann::json& body);

// POST /v1/sessions: {"id", "kind", "env", "limits", "isolation", "ttl_s",
// "fresh_workspace", "require", "permissive"}.
Parsed<session::CreateRequest> ParseSession(const nlohmann::json& body);

// POST /v1/sessions/{id}/exec: {"command", "timeout_ms", "stdin"}.
Parsed<session::ExecCall> ParseExec(const nlohmann::json& body);

// "isolation": a level ("none", "standard", "strict") or an object
// {"level", "network": "none" | "host"}; absent: standard, as `cordon run`.
// The one place that maps the field onto the spec.
Parsed<void> ApplyIsolation(const nlohmann::json& value, contain::Spec& spec);

}  // namespace cordon::api
