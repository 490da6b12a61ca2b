// Structured logs: one JSON object per line on stderr, with the time, a
// level, an event name and the ids that tie lines together (request_id,
// session_id, grant_id).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace cordon::api {

void Log(std::string_view level, std::string_view event, nlohmann::json fields = {});

}  // namespace cordon::api
