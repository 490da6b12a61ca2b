// The bound on output in a tool result (--mcp-output-limit): an agent's
// context window is small, so each stream is cut past the limit, on a
// UTF-8 boundary, and says how much was left out.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cordon::mcp {

// The largest n <= limit such that text[0, n) does not end inside a UTF-8
// sequence (n == text.size() when it fits). Bytes that are not UTF-8 are
// cut where they fall: at most three continuation bytes are stepped back
// over, the longest a valid sequence has after its lead byte.
size_t Utf8Cut(std::string_view text, size_t limit);

struct Bounded {
  std::string text;        // what is kept, and the marker when anything was left out
  bool truncated = false;  // something produced is not in `text`
};

// `text`: what was captured of a stream that produced `produced` bytes
// (more when the capture itself was cut; 0: text.size()). Past `limit`
// the text is cut (Utf8Cut) and "\n[... N bytes truncated]" is appended,
// N counting every byte produced and not kept.
Bounded BoundOutput(std::string text, uint64_t limit, uint64_t produced = 0,
                    bool capture_truncated = false);

// Every string in `value` (a kernel's mime bundles, a traceback), in
// document order, bounded as BoundOutput bounds a stream, by what is left of
// `budget`, which they use up as they are kept. True if anything was cut.
bool BoundStrings(nlohmann::json& value, uint64_t& budget);

}  // namespace cordon::mcp
