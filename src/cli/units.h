// Parsing the CLI's durations, sizes and counts. Each error says what was
// expected; the caller prefixes the option's name.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace cordon::cli {

// Seconds with an optional fraction ("2", "0.5"), or with a unit: "ms", "s",
// "m", "h", "d" ("250ms", "1.5s", "2m", "12h", "7d"). Returns milliseconds;
// never negative.
std::expected<int64_t, std::string> ParseDurationMs(std::string_view text);
// The same, for a timer (a timeout, a grace, a TTL): at most a year
// (contain::kMaxDurationMs), so that the deadline it sets cannot overflow.
std::expected<int64_t, std::string> ParseTimerMs(std::string_view text);

// Bytes, with an optional binary suffix K, M, G or T (K = 1024), optionally
// followed by "iB" or "B" and in either case ("16K", "256MiB", "1g").
std::expected<int64_t, std::string> ParseSize(std::string_view text);

// A plain non-negative decimal integer.
std::expected<int64_t, std::string> ParseCount(std::string_view text);

// A number of CPUs, whole or decimal ("2", "0.5"), above 0 and at most
// contain::kMaxCpus.
std::expected<double, std::string> ParseCpus(std::string_view text);

}  // namespace cordon::cli
