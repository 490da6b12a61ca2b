#include "jupyter/execute.h"

#include <algorithm>
#include <string_view>

#include "sys/json_text.h"

namespace cordon::jupyter {
namespace {

// Room for the truncation marker and a note after the kept output.
constexpr size_t kNoteRoom = 512;

// Appends without letting the capacity pass what the budget can need: a
// doubling std::string would hold 16 MiB (and copy 8 into it) for a 10 MiB
// budget, and a marker appended at the end would double it again.
void Append(std::string& into, std::string_view text, size_t budget) {
  if (into.size() + text.size() > into.capacity()) {
    size_t want = std::max(into.size() + text.size(), 2 * into.capacity());
    into.reserve(std::min(want, std::max(budget, into.size() + text.size()) + kNoteRoom));
  }
  into.append(text);
}

}  // namespace

std::string TruncationMarker(size_t budget) {
  return "\n[cordon: output truncated at the budget of " + std::to_string(budget) + " bytes]\n";
}

bool ExecuteCollector::Spend(size_t bytes) {
  if (output_.truncated) return false;
  if (bytes > budget_ - spent_) {
    output_.truncated = true;
    return false;
  }
  spent_ += bytes;
  return true;
}

bool ExecuteCollector::Feed(Channel channel, const Message& m) {
  if (m.parent_msg_id() != msg_id_) return complete();
  const std::string type = m.msg_type();
  const nlohmann::json& c = m.content;
  if (channel == Channel::kShell && type == "execute_reply") {
    replied_ = true;
    output_.status = c.value("status", "error");
    if (c.contains("execution_count") && c["execution_count"].is_number_integer()) {
      output_.execution_count = c["execution_count"].get<int>();
    }
    // Some errors are only in the reply (ipykernel prints a KeyboardInterrupt
    // to stderr and publishes no `error` message).
    if (output_.status == "error" && output_.error.is_null() && c.contains("ename")) {
      output_.error = {{"ename", c.value("ename", "")},
                       {"evalue", c.value("evalue", "")},
                       {"traceback", c.value("traceback", nlohmann::json::array())}};
    }
  } else if (channel == Channel::kIopub) {
    if (type == "status") {
      if (c.value("execution_state", "") == "idle") idle_ = true;
    } else if (type == "stream") {
      std::string text = c.value("text", "");
      std::string& into =
          c.value("name", "stdout") == "stderr" ? output_.stderr_text : output_.stdout_text;
      // The chunk that crosses the budget is kept up to it; after that,
      // nothing (a later small output must not look like it followed).
      size_t room = output_.truncated ? 0 : budget_ - spent_;
      if (Spend(text.size())) {
        Append(into, text, budget_);
      } else {
        Append(into, std::string_view(text).substr(0, room), budget_);
        spent_ += room;
      }
    } else if (type == "execute_result" || type == "display_data") {
      nlohmann::json result = {{"data", c.value("data", nlohmann::json::object())},
                               {"metadata", c.value("metadata", nlohmann::json::object())}};
      if (Spend(sys::JsonText(result["data"]).size())) output_.results.push_back(std::move(result));
    } else if (type == "error") {
      output_.error = {{"ename", c.value("ename", "")},
                       {"evalue", c.value("evalue", "")},
                       {"traceback", c.value("traceback", nlohmann::json::array())}};
    }
  }
  return complete();
}

ExecuteOutput ExecuteCollector::Take() {
  ExecuteOutput out = std::move(output_);
  out.bytes = spent_;
  if (out.truncated) out.stdout_text += TruncationMarker(budget_);
  return out;
}

}  // namespace cordon::jupyter
