// What a run observed, set once (sandbox2's Result): the outcome, the
// output, the release of the tree, and what it used.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "contain/grant.h"
#include "contain/launch.h"
#include "contain/teardown.h"

namespace cordon::run {

enum class Outcome {
  kExited,       // the main process exited on its own
  kSignaled,     // the main process was killed by a signal (not by cordon)
  kTimedOut,     // the deadline passed and cordon tore the tree down
  kOomKilled,    // the memory limit was hit and the kernel killed the main process
  kSetupFailed,  // the child failed before execve; see setup_error
  kCancelled,    // the caller cancelled (Ctrl-C at the CLI, a disconnected client)
};

std::string_view OutcomeName(Outcome outcome);

struct StreamResult {
  std::string data;
  bool truncated = false;
  uint64_t bytes = 0;  // produced, kept or not
};

struct Usage {
  int64_t wall_ms = 0;
  int64_t cpu_user_ms = 0;
  int64_t cpu_system_ms = 0;
  int64_t max_rss_bytes = 0;
};

struct GrantSummary {
  std::string id;
  std::string owner;
  std::vector<contain::Capability> enforced;
  std::vector<contain::Degradation> degraded;
  std::map<contain::Capability, std::string> mechanisms;
};

struct RunResult {
  GrantSummary grant;
  Outcome outcome = Outcome::kExited;
  std::optional<int> exit_code;  // set when the main process exited
  std::optional<int> signal;     // set when it was killed by a signal
  bool timed_out = false;
  bool oom_killed = false;  // the memory controller killed something in the tree
  StreamResult out;
  StreamResult err;
  contain::Release release;
  Usage usage;
  std::optional<contain::SetupError> setup_error;
  // Things that went wrong around the run without changing its outcome
  // (a store write, a cgroup that could not be removed).
  std::vector<std::string> warnings;
};

// The documented JSON shape (README "The JSON result").
nlohmann::json ToJson(const RunResult& result);
nlohmann::json ToJson(const GrantSummary& grant);
GrantSummary Summarize(const contain::Grant& grant);

// The exit status the CLI reports for a result: the child's status, 128+N
// for signal N, 124 on timeout, 125 when cordon failed (death unverified),
// 126/127 when the program could not be executed / was not found.
int ExitStatus(const RunResult& result);

}  // namespace cordon::run
