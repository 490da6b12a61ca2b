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
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/runs.h"
#include "session/sessions.h"

namespace cordon::mcp {

// A session_exec in flight, as the cancellation of one sees it.
struct ExecTicket {
  bool cancelled = false;
  bool finished = false;
  std::function<void()> interrupt;  // SIGINT, then the ladder (tools.cc)
};
// The MCP execs of each session in flight, oldest first. Sessions runs a
// session's executions one at a time, in order, so the oldest is the one
// running (unless an exec of the HTTP API came before it): a cancelled exec
// is interrupted only once it is the oldest, never another's command.
using ExecLines = std::map<std::string, std::deque<std::shared_ptr<ExecTicket>>>;

struct Engine {
  api::Runs& runs;
  session::Sessions& sessions;
  uint64_t max_file_bytes;  // --max-file-size
  uint64_t output_limit;    // --mcp-output-limit, per stream
  std::shared_ptr<ExecLines> execs = std::make_shared<ExecLines>();
};

// What a tool may do besides answering; the server makes one for each
// tools/call (server.cc). Everything is called on the loop.
class CallContext {
 public:
  virtual ~CallContext() = default;
  // Output of what the call runs, as it is captured: its latest line is the
  // message of the call's progress notifications.
  virtual void Output(std::string_view bytes) = 0;
  // `cancel` runs once if the call is cancelled before it is answered
  // (notifications/cancelled, or its MCP session ended); its answer is then
  // dropped. A later call replaces an earlier `cancel`.
  virtual void OnCancel(std::function<void()> cancel) = 0;
  // One of cordon's events (session_created, run_refused, ...): always to
  // stderr as a JSON line, and to the client as notifications/message when
  // `level` (debug ... emergency) is at or above what it asked for.
  virtual void Log(std::string_view level, std::string_view event, nlohmann::json fields) = 0;
  // The sessions this call's connection opened and closed: those still open
  // are closed with the connection (an MCP session's DELETE or expiry).
  virtual void SessionCreated(const std::string& id) = 0;
  virtual void SessionClosed(const std::string& id) = 0;
};
using Call = std::shared_ptr<CallContext>;

// A CallToolResult: {"content", "structuredContent"?, "isError"}.
using ToolDone = std::function<void(nlohmann::json result)>;

struct Tool {
  std::string name;
  std::string description;
  nlohmann::json input_schema;
  nlohmann::json output_schema;
  // `done` exactly once, maybe before call returns. The Engine outlives it.
  std::function<void(Engine& engine, const Call& call, const nlohmann::json& arguments,
                     ToolDone done)>
      call;
};

const std::vector<Tool>& Tools();
const Tool* FindTool(std::string_view name);

// tools/list's entries: name, description, inputSchema, outputSchema.
nlohmann::json ToolList();

// Results, as every tool makes them.
nlohmann::json ToolOk(nlohmann::json structured);  // with its text copy
nlohmann::json ToolError(const std::string& message);

}  // namespace cordon::mcp
