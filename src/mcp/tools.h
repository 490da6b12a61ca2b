// The MCP tools: one table, served by both transports (stdio, /mcp). Each
// tool maps its arguments onto the HTTP API's request body and goes
// through the same parser (api/requests.h) and the same engine (api::Runs,
// session::Sessions, session/files.h): no rule is written here again.
//
// What a result means (issue 15): a command that ran is never isError,
// however it ended; isError (with a message naming the field or the cause,
// and no structuredContent) means the call could not be carried out.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/runs.h"
#include "session/sessions.h"

namespace cordon::mcp {

struct Engine {
  api::Runs& runs;
  session::Sessions& sessions;
  uint64_t max_file_bytes;  // --max-file-size
  uint64_t output_limit;    // --mcp-output-limit, per stream
};

// A CallToolResult: {"content", "structuredContent"?, "isError"}.
using ToolDone = std::function<void(nlohmann::json result)>;

struct Tool {
  std::string name;
  std::string description;
  nlohmann::json input_schema;
  nlohmann::json output_schema;
  // `done` exactly once, maybe before call returns. The Engine outlives it.
  std::function<void(Engine& engine, const nlohmann::json& arguments, ToolDone done)> call;
};

const std::vector<Tool>& Tools();
const Tool* FindTool(std::string_view name);

// tools/list's entries: name, description, inputSchema, outputSchema.
nlohmann::json ToolList();

// Results, as every tool makes them.
nlohmann::json ToolOk(nlohmann::json structured);  // with its text copy
nlohmann::json ToolError(const std::string& message);

}  // namespace cordon::mcp
