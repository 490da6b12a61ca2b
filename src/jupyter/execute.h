// One execute_request's outcome, assembled from what the kernel sends. An
// execution is complete only when both its execute_reply (shell) and a
// `status: idle` whose parent is that request (iopub) have arrived; other
// requests' messages are ignored. Stream text and rich payloads share one
// output budget: past it nothing more is kept and `truncated` is set.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "jupyter/connection.h"
#include "jupyter/wire.h"

namespace cordon::jupyter {

struct ExecuteOutput {
  std::string status;  // "ok", "error" or "aborted" (from execute_reply)
  std::string stdout_text;
  std::string stderr_text;
  nlohmann::json results = nlohmann::json::array();  // [{"data", "metadata"}]
  nlohmann::json error;                              // null or {"ename", "evalue", "traceback"}
  std::optional<int> execution_count;
  bool truncated = false;
  // What was kept of the output, counted as the budget counts it: the text,
  // and each result's data as JSON text.
  size_t bytes = 0;
};

// The line appended to stdout when the budget cut the output.
std::string TruncationMarker(size_t budget);

class ExecuteCollector final {
 public:
  ExecuteCollector(std::string msg_id, size_t budget_bytes)
      : msg_id_(std::move(msg_id)), budget_(budget_bytes) {}

  // Takes any message; returns true once the execution is complete.
  bool Feed(Channel channel, const Message& message);
  bool complete() const { return replied_ && idle_; }
  bool replied() const { return replied_; }
  bool idle() const { return idle_; }
  // The budget was exceeded: the caller should interrupt and drain.
  bool over_budget() const { return output_.truncated; }
  const std::string& msg_id() const { return msg_id_; }

  ExecuteOutput Take();

 private:
  // Counts `bytes` against the budget; false (and truncated) past it.
  bool Spend(size_t bytes);

  std::string msg_id_;
  size_t budget_;
  size_t spent_ = 0;
  bool replied_ = false;
  bool idle_ = false;
  ExecuteOutput output_;
};

}  // namespace cordon::jupyter
