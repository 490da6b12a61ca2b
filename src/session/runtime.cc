#include "session/runtime.h"

namespace cordon::session {

nlohmann::json ToJson(ExecResult&& r) {
  if (r.kernel) {
    jupyter::ExecuteOutput& k = *r.kernel;
    return {{"status", k.status.empty() ? "error" : k.status},
            {"stdout", std::move(k.stdout_text)},
            {"stderr", std::move(k.stderr_text)},
            {"results", std::move(k.results)},
            {"error", std::move(k.error)},
            {"execution_count",
             k.execution_count ? nlohmann::json(*k.execution_count) : nlohmann::json()},
            {"truncated", k.truncated},
            {"timed_out", r.timed_out},
            {"invalidated", r.invalidated},
            {"oom_killed", r.oom_killed},
            {"duration_ms", r.duration_ms}};
  }
  return {{"exit_code", r.exit_code ? nlohmann::json(*r.exit_code) : nlohmann::json()},
          {"stdout", std::move(r.out.data)},
          {"stderr", std::move(r.err.data)},
          {"stdout_truncated", r.out.truncated},
          {"stderr_truncated", r.err.truncated},
          {"stdout_bytes", r.out.bytes},
          {"stderr_bytes", r.err.bytes},
          {"timed_out", r.timed_out},
          {"invalidated", r.invalidated},
          {"shell_restarted", r.shell_restarted},
          {"oom_killed", r.oom_killed},
          {"duration_ms", r.duration_ms}};
}

}  // namespace cordon::session
