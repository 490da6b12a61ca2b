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

// The same text and a newline, written into one buffer reserved up front for
// a value that holds `output_bytes` of captured output (a run's or an
// execution's): text escapes to about twice itself at most ("\n" is two
// bytes), and 4 KiB covers the rest of the value and an HTTP chunk's framing.
// For a large value dump() would copy the text at every doubling of its
// string and once more for the newline; here it is written once, and pages of
// the reservation left unwritten cost no memory. (The serializer is
// nlohmann's detail API, the one dump() itself uses.)
inline std::string JsonLine(const nlohmann::json& value, size_t output_bytes) {
  std::string text;
  text.reserve(2 * output_bytes + 4096);
  nlohmann::detail::serializer<nlohmann::json> serializer(
      nlohmann::detail::output_adapter<char, std::string>(text), ' ',
      nlohmann::json::error_handler_t::replace);
  serializer.dump(value, false, false, 0);
  text.push_back('\n');
  return text;
}

}  // namespace cordon::sys
