#include "api/metrics.h"

#include <cstdio>

namespace cordon::api {
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string Header(const std::string& name, const std::string& help, const char* type) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

void Histogram::Observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) ++buckets_[i];
  }
  ++count_;
  sum_ += seconds;
}

std::string Histogram::Render(const std::string& name, const std::string& help) const {
  std::string out = Header(name, help, "histogram");
  for (size_t i = 0; i < kBounds.size(); ++i) {
    out +=
        name + "_bucket{le=\"" + Number(kBounds[i]) + "\"} " + std::to_string(buckets_[i]) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + Number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

std::string Metrics::Render(size_t runs_active, size_t runs_unreleased, size_t sessions_live,
                            size_t sessions_quarantined) const {
  std::string out = Header("cordon_runs_total", "Runs finished, by outcome.", "counter");
  for (const char* outcome :
       {"exited", "signaled", "timed_out", "oom_killed", "setup_failed", "cancelled"}) {
    auto it = runs_by_outcome.find(outcome);
    out += std::string("cordon_runs_total{outcome=\"") + outcome + "\"} " +
           std::to_string(it == runs_by_outcome.end() ? 0 : it->second) + "\n";
  }
  out += Header("cordon_runs_active", "Runs in progress.", "gauge");
  out += "cordon_runs_active " + std::to_string(runs_active) + "\n";
  out += Header("cordon_runs_unreleased",
                "Answered runs whose teardown could not be verified yet (retried).", "gauge");
  out += "cordon_runs_unreleased " + std::to_string(runs_unreleased) + "\n";
  out += Header("cordon_sessions_active", "Sessions starting, ready or busy.", "gauge");
  out += "cordon_sessions_active " + std::to_string(sessions_live) + "\n";
  out += Header("cordon_sessions_quarantined", "Sessions whose teardown could not be verified yet.",
                "gauge");
  out += "cordon_sessions_quarantined " + std::to_string(sessions_quarantined) + "\n";
  out += Header("cordon_session_execs_total", "Session executions finished.", "counter");
  out += "cordon_session_execs_total " + std::to_string(session_execs) + "\n";
  out += Header("cordon_runtimes_died_total",
                "Session runtimes that died on their own (a crashed kernel), by kind.", "counter");
  for (const auto& [kind, n] : runtimes_died) {
    out += "cordon_runtimes_died_total{kind=\"" + kind + "\"} " + std::to_string(n) + "\n";
  }
  out += Header("cordon_captured_bytes_total", "Output bytes captured (kept).", "counter");
  out += "cordon_captured_bytes_total " + std::to_string(bytes_captured) + "\n";
  out += Header("cordon_http_requests_total", "HTTP requests answered, by status.", "counter");
  for (const auto& [status, n] : requests_by_status) {
    out += "cordon_http_requests_total{status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  }
  out += Header("cordon_mcp_tool_calls_total",
                "MCP tools/call requests answered, by tool and result (ok, error, cancelled).",
                "counter");
  for (const auto& [key, n] : mcp_tool_calls) {
    out += "cordon_mcp_tool_calls_total{tool=\"" + key.first + "\",result=\"" + key.second +
           "\"} " + std::to_string(n) + "\n";
  }
  out += spawn_seconds.Render("cordon_spawn_seconds",
                              "Time to start a run's process or a session's shell.");
  out += teardown_seconds.Render("cordon_teardown_seconds",
                                 "Time from the start of a teardown to verified death.");
  out += exec_seconds.Render("cordon_session_exec_seconds", "Session execution time.");
  return out;
}

}  // namespace cordon::api
