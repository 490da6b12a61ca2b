// What the fuzz targets share: the input as text, splitting it into parts,
// and a check that aborts (a crash libFuzzer records) when a property that
// must hold for every input does not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::fuzz {

inline std::string_view Text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits `text` at every `separator` (a byte string chosen so that seeds stay
// readable: "\n--\n" between files, "|" between frames).
inline std::vector<std::string> Split(std::string_view text, std::string_view separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t at = text.find(separator, start);
    if (at == std::string_view::npos) {
      parts.emplace_back(text.substr(start));
      return parts;
    }
    parts.emplace_back(text.substr(start, at - start));
    start = at + separator.size();
  }
}

// The first part up to `separator`, and the rest (empty when absent).
inline std::pair<std::string_view, std::string_view> Cut(std::string_view text,
                                                         std::string_view separator) {
  size_t at = text.find(separator);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + separator.size())};
}

[[noreturn]] inline void Fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: property failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace cordon::fuzz

#define CORDON_FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::cordon::fuzz::Fail(#cond, __FILE__, __LINE__))
