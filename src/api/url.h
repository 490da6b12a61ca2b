// The parts of a request target the routes need: path segments and the
// query, percent-decoded.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::api {

// "%2F" -> "/"; a '%' not followed by two hex digits is kept as it is.
std::string PercentDecode(std::string_view text);

// "a=1&b=x%20y" -> {a: 1, b: "x y"}; a key without '=' maps to "".
std::map<std::string, std::string> ParseQuery(std::string_view query);

// The first key given twice in `query` (decoded): a route refuses it
// rather than take one of the two ("?state=ready&state=closed").
std::optional<std::string> RepeatedQueryKey(std::string_view query);

// The first key of `query` that is not one of `known`: a route refuses it,
// so that a misspelt parameter (`?path=` for `?dir=`) is not quietly
// ignored.
std::optional<std::string> UnknownQueryKey(const std::map<std::string, std::string>& query,
                                           const std::vector<std::string_view>& known);

// A query flag: the key alone (""), "true", "1" or "yes" is true; "false",
// "0" or "no" is false; anything else is nothing.
std::optional<bool> ParseQueryFlag(std::string_view text);

// A query value that is a byte count ("?offset=4096"): decimal digits only,
// within uint64_t; anything else (empty, a sign, spaces, too large) is
// nothing.
std::optional<uint64_t> ParseByteCount(std::string_view text);

// "/v1/sessions/x" -> {"v1", "sessions", "x"}, still encoded (a decoded
// "%2F" must not become a separator).
std::vector<std::string> Segments(const std::string& path);

// Whether `segments` are exactly `pattern`, where "*" matches any one
// segment: {"v1", "sessions", "*"}.
bool SegmentsMatch(const std::vector<std::string>& segments,
                   std::initializer_list<const char*> pattern);

}  // namespace cordon::api
