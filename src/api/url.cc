#include "api/url.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

namespace cordon::api {

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

namespace {

// A query's key or value as forms encode it: '+' is a space ("%2B" is '+').
std::string QueryDecode(std::string_view s) {
  std::string spaced(s);
  std::ranges::replace(spaced, '+', ' ');
  return PercentDecode(spaced);
}

// Calls `each(key, value)`, each decoded, for the pairs of `q` in order.
template <typename Each>
void ForEachQueryPair(std::string_view q, Each each) {
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    size_t eq = pair.find('=');
    each(QueryDecode(pair.substr(0, eq)),
         eq == std::string_view::npos ? "" : QueryDecode(pair.substr(eq + 1)));
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
}

}  // namespace

std::map<std::string, std::string> ParseQuery(std::string_view q) {
  std::map<std::string, std::string> out;
  ForEachQueryPair(q, [&](std::string key, std::string value) { out[key] = std::move(value); });
  return out;
}

std::optional<std::string> RepeatedQueryKey(std::string_view q) {
  std::set<std::string> seen;
  std::optional<std::string> twice;
  ForEachQueryPair(q, [&](std::string key, const std::string&) {
    if (!twice && !seen.insert(key).second) twice = std::move(key);
  });
  return twice;
}

std::optional<std::string> UnknownQueryKey(const std::map<std::string, std::string>& query,
                                           const std::vector<std::string_view>& known) {
  for (const auto& [key, value] : query) {
    if (std::find(known.begin(), known.end(), key) == known.end()) return key;
  }
  return std::nullopt;
}

std::optional<bool> ParseQueryFlag(std::string_view text) {
  if (text.empty() || text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  return std::nullopt;
}

std::optional<uint64_t> ParseByteCount(std::string_view text) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool SegmentsMatch(const std::vector<std::string>& segments,
                   std::initializer_list<const char*> pattern) {
  if (segments.size() != pattern.size()) return false;
  size_t i = 0;
  for (const char* want : pattern) {
    if (std::string_view(want) != "*" && segments[i] != want) return false;
    ++i;
  }
  return true;
}

}  // namespace cordon::api
