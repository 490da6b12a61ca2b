#include "mcp/output.h"

namespace cordon::mcp {

size_t Utf8Cut(std::string_view text, size_t limit) {
  if (text.size() <= limit) return text.size();
  auto continuation = [&](size_t i) {
    return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  size_t n = limit;
  // text[n] is the first byte left out: cutting before it splits nothing
  // unless it continues a sequence begun at or before text[n - 1].
  for (int back = 0; back < 3 && n > 0 && continuation(n); ++back) --n;
  // Not UTF-8 (more than three continuation bytes in a row): cut at the limit.
  if (continuation(n)) return limit;
  return n;
}

Bounded BoundOutput(std::string text, uint64_t limit, uint64_t produced, bool capture_truncated) {
  Bounded b;
  if (produced < text.size()) produced = text.size();
  const size_t keep = Utf8Cut(text, limit);
  b.truncated = capture_truncated || keep < text.size() || produced > text.size();
  if (keep < text.size()) text.resize(keep);
  if (b.truncated) {
    text += "\n[... " + std::to_string(produced - keep) + " bytes truncated]";
  }
  b.text = std::move(text);
  return b;
}

bool BoundStrings(nlohmann::json& value, uint64_t& budget) {
  if (value.is_string()) {
    auto& text = value.get_ref<std::string&>();
    const uint64_t size = text.size();
    if (size <= budget) {
      budget -= size;
      return false;
    }
    text = BoundOutput(std::move(text), budget).text;
    budget = 0;
    return true;
  }
  bool cut = false;
  if (value.is_structured()) {
    for (auto& item : value) cut |= BoundStrings(item, budget);
  }
  return cut;
}

}  // namespace cordon::mcp
