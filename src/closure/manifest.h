// A closure's manifest and its pin.
//
// A manifest is {"entries": [{"path", "sha256", "size", "executable"}, ...]}.
// Its pin is the SHA-256 of its canonical form: the entries array alone, each
// entry's keys in the order path, sha256, size, executable, with compact
// separators and UTF-8 left unescaped (Python's
// json.dumps(entries, separators=(",", ":"), ensure_ascii=False)). So the
// formatting and key order of the file do not change the pin, and the
// SHA-256 of the file itself is never a pin.
//
// Parsing fails closed: anything that is not exactly a manifest (see
// closure/rule.h for every reason) is refused, naming the rule and the entry.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "closure/rule.h"
#include "sys/error.h"

namespace cordon::closure {

// Where a closure directory keeps its own manifest. The name is reserved, so
// it is never an entry; make and verify pass over exactly this file, and
// anything else below .cordon/ is reported like any unlisted file.
inline constexpr std::string_view kManifestPath = ".cordon/manifest.json";
inline constexpr std::string_view kManifestDir = ".cordon";

struct Entry {
  std::string path;    // relative, '/'-separated, valid UTF-8 (see PathProblem)
  std::string sha256;  // 64 lowercase hex digits
  uint64_t size = 0;
  bool executable = false;  // the user x bit

  bool operator==(const Entry&) const = default;
};

// Entries are strictly ascending by path, compared bytewise.
struct Manifest {
  std::vector<Entry> entries;

  bool operator==(const Manifest&) const = default;
};

// Parses and validates a manifest's text.
std::expected<Manifest, Failure> ParseManifest(std::string_view text);

// ParseManifest, then refuses (closure_pin) unless the manifest's pin is `pin`.
std::expected<Manifest, Failure> ParsePinnedManifest(std::string_view text, std::string_view pin);

// Why `path` cannot name a closure file (path_* rules), or nothing. The
// message names the path. Reserved: paths starting with ".cordon", kept for
// cordon's own files beside a closure.
std::optional<Failure> PathProblem(std::string_view path);

// The text whose digest is the pin. `manifest` must be valid (as parsed).
std::string CanonicalText(const Manifest& manifest);

// The pin: 64 lowercase hex digits.
sys::Result<std::string> Pin(const Manifest& manifest);

// Nothing when `manifest`'s pin is `pin`; otherwise a closure_pin failure.
std::optional<Failure> CheckPin(const Manifest& manifest, std::string_view pin);

// The manifest as a JSON value ({"entries": [...]}), for printing.
nlohmann::json ToJson(const Manifest& manifest);

// Reads a manifest file. One larger than 64 MiB is refused as such, rather
// than cut and then reported as invalid JSON.
sys::Result<std::string> ReadManifestText(const std::string& path);

}  // namespace cordon::closure
