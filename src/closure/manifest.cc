#include "closure/manifest.h"

#include <fcntl.h>

#include <set>
#include <string_view>
#include <unordered_set>

#include "closure/sha256.h"
#include "sys/fd.h"
#include "sys/json_text.h"
#include "sys/text.h"

namespace cordon::closure {
namespace {

using json = nlohmann::json;

constexpr std::string_view kReservedPrefix = ".cordon";
constexpr size_t kManifestLimit = size_t{64} << 20;

std::unexpected<Failure> Refuse(Rule rule, std::string path, std::string message) {
  return std::unexpected(Failure{rule, std::move(path), std::move(message)});
}

// A path as it appears in a message: quoted, control characters escaped.
std::string Quoted(std::string_view text) { return sys::JsonText(json(std::string(text))); }

// Exactly Python's json.dumps(s, ensure_ascii=False) for a valid UTF-8
// string: only '"', '\\' and control characters below 0x20 are escaped
// (U+007F and U+2028 are not), in lowercase hex. This is a hash format, not
// display JSON, so it is written here byte for byte rather than left to a
// library whose escaping could change.
void AppendCanonicalString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// nlohmann keeps the last of duplicate keys silently; another parser may keep
// the first. A manifest must mean one thing to every reader, so a duplicate
// key is refused. This callback records the first one seen.
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_.empty()) keys_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_.empty() && !keys_.back().insert(parsed.get<std::string>()).second &&
            !duplicate_) {
          duplicate_ = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  }
  const std::optional<std::string>& duplicate() const { return duplicate_; }

 private:
  std::vector<std::unordered_set<std::string>> keys_;
  std::optional<std::string> duplicate_;
};

std::expected<Entry, Failure> ParseEntry(const json& value, size_t index) {
  const std::string where = "entries[" + std::to_string(index) + "]";
  if (!value.is_object()) {
    return Refuse(Rule::kEntryNotObject, "",
                  where + " is " + std::string(value.type_name()) + ", not an object");
  }
  Entry entry;
  const auto path = value.find("path");
  if (path == value.end() || !path->is_string()) {
    return Refuse(Rule::kBadPath, "",
                  where + (path == value.end() ? ": no \"path\""
                                               : ": \"path\" is " + std::string(path->type_name()) +
                                                     ", not a string"));
  }
  entry.path = path->get<std::string>();
  const std::string named = where + " (" + Quoted(entry.path) + ")";
  for (const auto& [key, unused] : value.items()) {
    if (key != "path" && key != "sha256" && key != "size" && key != "executable") {
      return Refuse(Rule::kExtraKey, entry.path,
                    named + ": unknown key " + Quoted(key) +
                        " (an entry has only path, sha256, size, executable)");
    }
  }
  if (auto problem = PathProblem(entry.path)) {
    problem->message = where + ": " + problem->message;
    return std::unexpected(std::move(*problem));
  }

  const auto sha = value.find("sha256");
  if (sha == value.end() || !sha->is_string() || !IsSha256Hex(sha->get<std::string>())) {
    return Refuse(Rule::kBadSha256, entry.path,
                  named + ": \"sha256\" must be 64 lowercase hex digits" +
                      (sha == value.end() ? " (it is missing)" : ", not " + sys::JsonText(*sha)));
  }
  entry.sha256 = sha->get<std::string>();

  // JSON has one number type; a manifest's size is an integer. Booleans are
  // a separate JSON type, so `true` is refused here too, and so is 1.0.
  const auto size = value.find("size");
  if (size == value.end() || !size->is_number_integer() ||
      (!size->is_number_unsigned() && size->get<int64_t>() < 0)) {
    return Refuse(Rule::kBadSize, entry.path,
                  named + ": \"size\" must be a non-negative integer" +
                      (size == value.end() ? " (it is missing)" : ", not " + sys::JsonText(*size)));
  }
  entry.size = size->is_number_unsigned() ? size->get<uint64_t>()
                                          : static_cast<uint64_t>(size->get<int64_t>());

  const auto executable = value.find("executable");
  if (executable == value.end() || !executable->is_boolean()) {
    return Refuse(Rule::kBadExecutable, entry.path,
                  named + ": \"executable\" must be true or false" +
                      (executable == value.end() ? " (it is missing)"
                                                 : ", not " + sys::JsonText(*executable)));
  }
  entry.executable = executable->get<bool>();
  return entry;
}

}  // namespace

std::optional<Failure> PathProblem(std::string_view path) {
  const std::string quoted = Quoted(path);
  auto problem = [&](Rule rule, const std::string& why) {
    return Failure{rule, std::string(path), "path " + quoted + " " + why};
  };
  if (path.empty()) return problem(Rule::kPathEmptySegment, "is empty");
  // A NUL byte would silently cut the path short in every system call.
  if (path.find('\0') != std::string_view::npos) {
    return problem(Rule::kPathNul, "contains a NUL byte");
  }
  if (!sys::IsUtf8(path)) {
    return Failure{Rule::kBadPath, std::string(path), "path " + quoted + " is not valid UTF-8"};
  }
  if (path.front() == '/') return problem(Rule::kPathAbsolute, "is absolute; paths are relative");
  size_t start = 0;
  while (true) {
    size_t end = path.find('/', start);
    std::string_view segment =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (segment.empty()) {
      return problem(Rule::kPathEmptySegment, "has an empty segment (\"//\" or a trailing \"/\")");
    }
    if (segment == "..") return problem(Rule::kPathTraversal, "contains \"..\"");
    // "a/./b" names the same file as "a/b" and would slip past duplicate_path.
    if (segment == ".") return problem(Rule::kPathDotSegment, "contains a \".\" segment");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (path.starts_with(kReservedPrefix)) {
    return problem(Rule::kPathReserved,
                   "is reserved: names starting with \".cordon\" are kept for cordon's own files");
  }
  return std::nullopt;
}

std::expected<Manifest, Failure> ParseManifest(std::string_view text) {
  DuplicateKeyFinder finder;
  json root;
  try {
    root = json::parse(text, std::ref(finder));
  } catch (const json::exception& e) {
    return Refuse(Rule::kInvalidJson, "",
                  std::string("the manifest is not valid JSON: ") + e.what());
  }
  if (finder.duplicate()) {
    return Refuse(Rule::kDuplicateKey, "",
                  "the manifest repeats the key " + Quoted(*finder.duplicate()) +
                      " in one object; readers disagree on which value wins");
  }
  if (!root.is_object()) {
    return Refuse(Rule::kNotObject, "",
                  "the manifest is " + std::string(root.type_name()) +
                      ", not an object {\"entries\": [...]}");
  }
  const auto entries = root.find("entries");
  if (entries == root.end()) {
    return Refuse(Rule::kNoEntries, "", "the manifest has no \"entries\" key");
  }
  for (const auto& [key, unused] : root.items()) {
    if (key != "entries") {
      return Refuse(Rule::kExtraKey, "",
                    "the manifest has an unknown top-level key " + Quoted(key) +
                        " (only \"entries\" is allowed)");
    }
  }
  if (!entries->is_array()) {
    return Refuse(Rule::kEntriesNotArray, "",
                  "\"entries\" is " + std::string(entries->type_name()) + ", not an array");
  }
  if (entries->empty()) {
    return Refuse(Rule::kEmptyEntries, "",
                  "\"entries\" is empty: a closure lists at least one file");
  }

  Manifest manifest;
  std::set<std::string, std::less<>> paths;
  for (size_t i = 0; i < entries->size(); ++i) {
    CORDON_ASSIGN_OR_RETURN(Entry entry, ParseEntry((*entries)[i], i));
    const std::string named = "entries[" + std::to_string(i) + "] (" + Quoted(entry.path) + ")";
    if (!paths.insert(entry.path).second) {
      return Refuse(Rule::kDuplicatePath, entry.path, named + ": the path is listed twice");
    }
    // std::string compares as unsigned bytes (char_traits<char> is memcmp).
    if (!manifest.entries.empty() && entry.path < manifest.entries.back().path) {
      return Refuse(Rule::kUnsorted, entry.path,
                    named + " comes after " + Quoted(manifest.entries.back().path) +
                        ": entries must be sorted by path, bytewise");
    }
    manifest.entries.push_back(std::move(entry));
  }
  // "a" and "a/b" cannot both be files; the ancestors need not be adjacent
  // in sorted order ("a" < "a-b" < "a/b"), hence the set.
  for (const Entry& entry : manifest.entries) {
    for (size_t slash = entry.path.find('/'); slash != std::string::npos;
         slash = entry.path.find('/', slash + 1)) {
      std::string_view ancestor(entry.path.data(), slash);
      if (paths.contains(ancestor)) {
        return Refuse(Rule::kPathConflict, entry.path,
                      "path " + Quoted(entry.path) + " is beneath " + Quoted(ancestor) +
                          ", which is listed as a file");
      }
    }
  }
  return manifest;
}

std::expected<Manifest, Failure> ParsePinnedManifest(std::string_view text, std::string_view pin) {
  CORDON_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(text));
  if (auto mismatch = CheckPin(manifest, pin)) return std::unexpected(std::move(*mismatch));
  return manifest;
}

std::string CanonicalText(const Manifest& manifest) {
  std::string out = "[";
  for (size_t i = 0; i < manifest.entries.size(); ++i) {
    const Entry& e = manifest.entries[i];
    if (i > 0) out += ',';
    out += "{\"path\":";
    AppendCanonicalString(out, e.path);
    out += ",\"sha256\":";
    AppendCanonicalString(out, e.sha256);
    out += ",\"size\":";
    out += std::to_string(e.size);
    out += ",\"executable\":";
    out += e.executable ? "true" : "false";
    out += '}';
  }
  out += ']';
  return out;
}

sys::Result<std::string> Pin(const Manifest& manifest) {
  return Sha256Hex(CanonicalText(manifest));
}

std::optional<Failure> CheckPin(const Manifest& manifest, std::string_view pin) {
  auto actual = Pin(manifest);
  if (!actual) {
    return Failure{Rule::kClosurePin, "", "cannot compute the pin: " + actual.error().message()};
  }
  if (*actual == pin) return std::nullopt;
  return Failure{Rule::kClosurePin, "",
                 "the manifest's pin is " + *actual + ", not " + Quoted(pin) +
                     " (a pin is the SHA-256 of the canonical entries, not of the file)"};
}

json ToJson(const Manifest& manifest) {
  json entries = json::array();
  for (const Entry& e : manifest.entries) {
    entries.push_back(
        {{"path", e.path}, {"sha256", e.sha256}, {"size", e.size}, {"executable", e.executable}});
  }
  return {{"entries", std::move(entries)}};
}

sys::Result<std::string> ReadManifestText(const std::string& path) {
  CORDON_ASSIGN_OR_RETURN(std::string text, sys::ReadFile(path, kManifestLimit + 1));
  if (text.size() > kManifestLimit) {
    return sys::Fail("read(\"" + path + "\"): the manifest is larger than 64 MiB", EFBIG);
  }
  return text;
}

}  // namespace cordon::closure
