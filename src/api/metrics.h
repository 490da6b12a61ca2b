// What /metrics shows, in Prometheus' text format (version 0.0.4): runs by
// outcome, live and quarantined sessions, spawn and teardown latency
// histograms, bytes captured, requests by status.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace cordon::api {

class Histogram final {
 public:
  void Observe(double seconds);
  // The _bucket, _sum and _count lines of metric `name`.
  std::string Render(const std::string& name, const std::string& help) const;

 private:
  static constexpr std::array<double, 12> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,   0.25,   0.5,   1.0,  5.0};
  std::array<uint64_t, kBounds.size()> buckets_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct Metrics {
  std::map<std::string, uint64_t> runs_by_outcome;
  std::map<int, uint64_t> requests_by_status;
  uint64_t session_execs = 0;
  std::map<std::string, uint64_t> runtimes_died;  // by session kind
  uint64_t bytes_captured = 0;                    // stdout + stderr kept, runs and executions
  // MCP tools/call requests answered (src/mcp/server.cc), by tool and by
  // result: "ok", "error" (isError, or a JSON-RPC error) or "cancelled".
  std::map<std::pair<std::string, std::string>, uint64_t> mcp_tool_calls;
  Histogram spawn_seconds;     // a run's launch, a session's start to ready
  Histogram teardown_seconds;  // from teardown's start to verified death
  Histogram exec_seconds;      // a session execution

  // The gauges (runs active and unreleased, sessions live and quarantined)
  // are read when rendering.
  std::string Render(size_t runs_active, size_t runs_unreleased, size_t sessions_live,
                     size_t sessions_quarantined) const;
};

double Seconds(std::chrono::steady_clock::duration d);

}  // namespace cordon::api
