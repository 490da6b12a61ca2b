#include "run/result.h"

#include <cerrno>
#include <cstring>

#include "sys/error.h"

namespace cordon::run {

using nlohmann::json;

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kExited:
      return "exited";
    case Outcome::kSignaled:
      return "signaled";
    case Outcome::kTimedOut:
      return "timed_out";
    case Outcome::kOomKilled:
      return "oom_killed";
    case Outcome::kSetupFailed:
      return "setup_failed";
    case Outcome::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

GrantSummary Summarize(const contain::Grant& g) {
  return GrantSummary{g.id, g.owner, g.enforced, g.degraded, g.mechanisms};
}

json ToJson(const GrantSummary& grant) {
  json enforced = json::array();
  for (auto c : grant.enforced) enforced.push_back(contain::CapabilityName(c));
  json degraded = json::array();
  for (const auto& d : grant.degraded) {
    degraded.push_back(
        {{"capability", contain::CapabilityName(d.capability)}, {"reason", d.reason}});
  }
  json mechanisms = json::object();
  for (const auto& [c, m] : grant.mechanisms)
    mechanisms[std::string(contain::CapabilityName(c))] = m;
  return {{"id", grant.id},
          {"owner", grant.owner},
          {"enforced", enforced},
          {"degraded", degraded},
          {"mechanisms", mechanisms}};
}

json ToJson(const RunResult& r) {
  json setup_error;
  if (r.setup_error) {
    setup_error = {
        {"step", contain::SetupStepName(r.setup_error->step)},
        {"errno", sys::ErrnoName(r.setup_error->err)},
        {"message", std::strerror(r.setup_error->err)},
        {"detail", r.setup_error->detail.empty() ? json() : json(r.setup_error->detail)}};
  }
  return {
      {"grant", ToJson(r.grant)},
      {"outcome", OutcomeName(r.outcome)},
      {"exit_code", r.exit_code ? json(*r.exit_code) : json()},
      {"signal", r.signal ? json(*r.signal) : json()},
      {"timed_out", r.timed_out},
      {"oom_killed", r.oom_killed},
      {"stdout", r.out.data},
      {"stderr", r.err.data},
      {"stdout_truncated", r.out.truncated},
      {"stderr_truncated", r.err.truncated},
      {"stdout_bytes", r.out.bytes},
      {"stderr_bytes", r.err.bytes},
      {"release", contain::ToJson(r.release)},
      {"usage",
       {{"wall_ms", r.usage.wall_ms},
        {"cpu_user_ms", r.usage.cpu_user_ms},
        {"cpu_system_ms", r.usage.cpu_system_ms},
        {"max_rss_bytes", r.usage.max_rss_bytes}}},
      {"setup_error", setup_error},
      {"warnings", r.warnings},
  };
}

int ExitStatus(const RunResult& r) {
  if (!r.release.dead) return 125;
  switch (r.outcome) {
    case Outcome::kSetupFailed:
      if (r.setup_error && r.setup_error->step == contain::SetupStep::kExec) {
        return (r.setup_error->err == ENOENT || r.setup_error->err == ENOTDIR) ? 127 : 126;
      }
      return 125;
    case Outcome::kTimedOut:
      return 124;
    case Outcome::kExited:
      return r.exit_code.value_or(125);
    case Outcome::kSignaled:
    case Outcome::kOomKilled:
    case Outcome::kCancelled:
      if (r.signal) return 128 + *r.signal;
      return r.exit_code.value_or(125);
  }
  return 125;
}

}  // namespace cordon::run
