// Checks and encodings of bytes as text, shared by the doors (the HTTP
// API's stdin_b64, MCP's file tools) and closure manifests, and the
// comma-separated lists they take and print.
#pragma once

#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::sys {

// Whether `s` is well-formed UTF-8: no overlong forms, no UTF-16
// surrogates, nothing past U+10FFFF.
bool IsUtf8(std::string_view s);

// Standard base64 (RFC 4648, padded).
std::string Base64Encode(std::string_view bytes);
// None when `text` is not padded base64 of some bytes.
std::optional<std::string> Base64Decode(std::string_view text);

// The fields of the comma-separated `list`, in order and as written:
// blanks are kept, and an empty field (or list) is "", for the caller to
// refuse or skip.
std::vector<std::string_view> SplitCommas(std::string_view list);

// `names` as "a, b, c": the known values an error lists.
template <std::ranges::input_range Names>
std::string JoinNames(Names&& names) {
  std::string out;
  bool first = true;
  for (auto&& name : names) {
    if (!first) out += ", ";
    out += std::string_view(name);
    first = false;
  }
  return out;
}

}  // namespace cordon::sys
