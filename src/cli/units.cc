#include "cli/units.h"

#include <cctype>
#include <charconv>
#include <limits>

#include "contain/spec.h"

namespace cordon::cli {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::expected<int64_t, std::string> ParseCount(std::string_view text) {
  if (text.empty()) return std::unexpected("expected a number, got nothing");
  if (text[0] == '-') return std::unexpected("must not be negative, got " + Quote(text));
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) return std::unexpected(Quote(text) + " is too large");
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return std::unexpected("expected a whole number, got " + Quote(text));
  }
  return value;
}

std::expected<double, std::string> ParseCpus(std::string_view text) {
  const std::string expected = "expected a number of CPUs such as 1, 2 or 0.5, got " + Quote(text);
  // Digits and at most one '.', nothing else: no sign, exponent, "inf" or "nan".
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string_view::npos ||
      text.find('.') != text.rfind('.') || text == ".") {
    return std::unexpected(expected);
  }
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::unexpected(expected);
  if (!(value > 0)) return std::unexpected("must be above 0, got " + Quote(text));
  if (value < contain::kMinCpus) {
    return std::unexpected(
        "must be at least 0.01 (the kernel's smallest quota, 1 ms of each "
        "100 ms), got " +
        Quote(text));
  }
  if (value > contain::kMaxCpus) {
    return std::unexpected("must be at most " +
                           std::to_string(static_cast<int>(contain::kMaxCpus)) + ", got " +
                           Quote(text));
  }
  return value;
}

std::expected<int64_t, std::string> ParseSize(std::string_view text) {
  const std::string expected =
      "expected a size in bytes such as 4096, 16K, 256M or 1G, got " + Quote(text);
  if (text.empty()) return std::unexpected(expected);
  if (text[0] == '-') return std::unexpected("must not be negative, got " + Quote(text));
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return std::unexpected(expected);
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec != std::errc()) return std::unexpected(Quote(text) + " is too large");
  std::string suffix = Lower(text.substr(digits));
  int shift = -1;
  for (auto [name, bits] : {std::pair{"", 0},
                            {"b", 0},
                            {"k", 10},
                            {"kb", 10},
                            {"kib", 10},
                            {"m", 20},
                            {"mb", 20},
                            {"mib", 20},
                            {"g", 30},
                            {"gb", 30},
                            {"gib", 30},
                            {"t", 40},
                            {"tb", 40},
                            {"tib", 40}}) {
    if (suffix == name) shift = bits;
  }
  if (shift < 0) return std::unexpected(expected);
  if (value > (kMax >> shift)) return std::unexpected(Quote(text) + " is too large");
  return value << shift;
}

std::expected<int64_t, std::string> ParseDurationMs(std::string_view text) {
  const std::string expected =
      "expected seconds such as 2 or 0.5, or a value with a unit (250ms, 1.5s, 2m, 12h, 7d), "
      "got " +
      Quote(text);
  if (text.empty()) return std::unexpected(expected);
  if (text[0] == '-') return std::unexpected("must not be negative, got " + Quote(text));
  // Sizes are 1M; a month or a megasecond is no duration anyone means.
  if (text.ends_with('M') && !text.ends_with("MS")) {
    return std::unexpected("M is a size, not a unit of time: write m for minutes (1m), got " +
                           Quote(text));
  }
  std::string lower = Lower(text);
  int64_t unit_ms = 1000;
  std::string_view number(lower);
  if (number.ends_with("ms")) {
    unit_ms = 1;
    number.remove_suffix(2);
  } else if (number.ends_with("s")) {
    number.remove_suffix(1);
  } else if (number.ends_with("m")) {
    unit_ms = 60'000;
    number.remove_suffix(1);
  } else if (number.ends_with("h")) {
    unit_ms = 3'600'000;
    number.remove_suffix(1);
  } else if (number.ends_with("d")) {
    unit_ms = 86'400'000;
    number.remove_suffix(1);
  }
  size_t dot = number.find('.');
  std::string_view whole = number.substr(0, dot);
  std::string_view frac =
      dot == std::string_view::npos ? std::string_view() : number.substr(dot + 1);
  if (whole.empty() && frac.empty()) return std::unexpected(expected);
  for (std::string_view part : {whole, frac}) {
    for (char c : part) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::unexpected(expected);
    }
  }
  if (dot != std::string_view::npos && frac.empty()) return std::unexpected(expected);
  int64_t w = 0;
  if (!whole.empty()) {
    auto [ptr, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), w);
    if (ec != std::errc()) return std::unexpected(Quote(text) + " is too large");
  }
  if (w > kMax / unit_ms) return std::unexpected(Quote(text) + " is too large");
  int64_t ms = w * unit_ms;
  // The fraction, to millisecond precision (digits beyond are dropped).
  int64_t scale = unit_ms;
  for (char c : frac) {
    if (scale % 10 != 0) break;
    scale /= 10;
    // "9223372036854775.9s": the whole seconds fit, the fraction does not.
    if (ms > kMax - (c - '0') * scale) return std::unexpected(Quote(text) + " is too large");
    ms += (c - '0') * scale;
  }
  return ms;
}

std::expected<int64_t, std::string> ParseTimerMs(std::string_view text) {
  auto ms = ParseDurationMs(text);
  if (ms && *ms > contain::kMaxDurationMs) {
    return std::unexpected("must be at most a year, got " + Quote(text));
  }
  return ms;
}

}  // namespace cordon::cli
