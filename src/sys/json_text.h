// JSON to text, the one way cordon does it: bytes that are not valid UTF-8
// (a child's output, an argv) become U+FFFD instead of throwing or producing
// invalid JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cordon::sys {

inline std::string JsonText(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cordon::sys
