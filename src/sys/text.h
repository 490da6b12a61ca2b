// Checks and encodings of bytes as text, shared by the doors (the HTTP
// API's stdin_b64, MCP's file tools) and closure manifests.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cordon::sys {

// Whether `s` is well-formed UTF-8: no overlong forms, no UTF-16
// surrogates, nothing past U+10FFFF.
bool IsUtf8(std::string_view s);

// Standard base64 (RFC 4648, padded).
std::string Base64Encode(std::string_view bytes);
// None when `text` is not padded base64 of some bytes.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace cordon::sys
