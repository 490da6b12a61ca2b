#include "contain/policy.h"

// Header-only, without exceptions: a bad file is an error value like any
// other (and a static binary's first exception is slow).
#define TOML_EXCEPTIONS 0
#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include <cstdio>
#include <functional>
#include <map>

namespace cordon::contain {
namespace {

using Setter = std::function<std::optional<PolicyError>(const toml::node&, const std::string&)>;

PolicyError Bad(const std::string& key, const std::string& reason) { return {key, reason}; }

std::optional<PolicyError> Integer(const toml::node& n, const std::string& key, int64_t& out) {
  auto v = n.value_exact<int64_t>();
  if (!v) return Bad(key, "must be an integer");
  out = *v;
  return std::nullopt;
}

std::optional<PolicyError> String(const toml::node& n, const std::string& key, std::string& out) {
  auto v = n.value_exact<std::string>();
  if (!v) return Bad(key, "must be a string");
  out = *v;
  return std::nullopt;
}

std::optional<PolicyError> Strings(const toml::node& n, const std::string& key,
                                   std::vector<std::string>& out) {
  const toml::array* a = n.as_array();
  if (!a) return Bad(key, "must be an array of strings");
  out.clear();
  for (size_t i = 0; i < a->size(); ++i) {
    std::string s;
    if (auto e = String((*a)[i], key + "[" + std::to_string(i) + "]", s)) return e;
    out.push_back(std::move(s));
  }
  return std::nullopt;
}

// Checks that `table` has only `known` keys.
std::optional<PolicyError> OnlyKnown(const toml::table& table, const std::string& prefix,
                                     std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : table) {
    if (std::find(known.begin(), known.end(), key.str()) == known.end()) {
      return Bad(prefix + std::string(key.str()), "unknown key");
    }
  }
  return std::nullopt;
}

Setter Limit(std::optional<int64_t>& target) {
  return [&target](const toml::node& n, const std::string& key) -> std::optional<PolicyError> {
    int64_t v = 0;
    if (auto e = Integer(n, key, v)) return e;
    target = v;
    return std::nullopt;
  };
}

Setter Binds(std::vector<Bind>& binds, bool writable) {
  return [&binds, writable](const toml::node& n,
                            const std::string& key) -> std::optional<PolicyError> {
    const toml::array* a = n.as_array();
    if (!a) return Bad(key, "must be an array of {src, dst} tables");
    std::erase_if(binds, [&](const Bind& b) { return b.writable == writable; });
    for (size_t i = 0; i < a->size(); ++i) {
      std::string at = key + "[" + std::to_string(i) + "]";
      const toml::table* t = (*a)[i].as_table();
      if (!t) return Bad(at, "must be a table {src = \"...\", dst = \"...\"}");
      if (auto e = OnlyKnown(*t, at + ".", {"src", "dst"})) return e;
      Bind b;
      b.writable = writable;
      const toml::node* src = t->get("src");
      if (!src) return Bad(at + ".src", "is missing");
      if (auto e = String(*src, at + ".src", b.source)) return e;
      b.target = b.source;
      if (const toml::node* dst = t->get("dst")) {
        if (auto e = String(*dst, at + ".dst", b.target)) return e;
      }
      binds.push_back(std::move(b));
    }
    return std::nullopt;
  };
}

// toml++ 3.3 (Debian 12) reaches __builtin_unreachable() when it asks
// whether one of these code points is whitespace
// (impl::is_non_ascii_horizontal_whitespace: its table has no branch for
// three of its blocks): undefined behaviour on a caller's bytes, found by
// fuzz/policy_toml. It asks that outside strings, and also while it scans
// on past a syntax error, wherever that leads, so no position is safe.
bool TomlCannotClassify(char32_t c) {
  if (c <= 0xA0 || c > 0xFEFF || c == 0x3000 || c == 0xFEFF) return false;
  const uint32_t block = (c - 0xA0) / 0x3FA;  // as the library computes it
  return block == 0 || block == 11 || block >= 63;
}

struct Unparseable {
  size_t line;
  char32_t code_point;
};

// The first such code point (UTF-8) and its line. Bytes that are not UTF-8
// are the parser's to refuse.
std::optional<Unparseable> FirstUnparseable(std::string_view text) {
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == '\n') ++line;
    const size_t length = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 0;
    if (length == 0 || i + length > text.size()) continue;
    char32_t c = b & (length == 2 ? 0x1F : 0x0F);
    bool valid = true;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = valid && (next & 0xC0) == 0x80;
      c = (c << 6) | (next & 0x3F);
    }
    if (valid && TomlCannotClassify(c)) return Unparseable{line, c};
  }
  return std::nullopt;
}

}  // namespace

std::optional<PolicyError> ApplyPolicy(std::string_view text, Spec& spec) {
  if (auto bad = FirstUnparseable(text)) {
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(bad->code_point));
    return Bad("", "line " + std::to_string(bad->line) + ": the character " + code +
                       " cannot be parsed safely by this build's TOML library (toml++ 3.3); "
                       "write the value without it");
  }
  toml::parse_result parsed = toml::parse(text);
  if (!parsed) {
    const auto& err = parsed.error();
    return Bad("", "line " + std::to_string(err.source().begin.line) + ": " +
                       std::string(err.description()));
  }
  const toml::table& root = parsed.table();
  IsolationSpec& iso = spec.isolation;
  Limits& l = spec.limits;

  const std::map<std::string, Setter, std::less<>> setters = {
      {"isolation",
       [&](const toml::node& n, const std::string& key) -> std::optional<PolicyError> {
         std::string s;
         if (auto e = String(n, key, s)) return e;
         auto level = ParseIsolation(s);
         if (!level) return Bad(key, "'" + s + "' is not none, standard or strict");
         iso.level = *level;
         return std::nullopt;
       }},
      {"network",
       [&](const toml::node& n, const std::string& key) -> std::optional<PolicyError> {
         std::string s;
         if (auto e = String(n, key, s)) return e;
         auto network = ParseNetwork(s);
         if (!network) return Bad(key, "'" + s + "' is not none or host");
         iso.network = *network;
         return std::nullopt;
       }},
      {"ro_binds", Binds(iso.binds, false)},
      {"binds", Binds(iso.binds, true)},
      {"tmp_size_bytes",
       [&](const toml::node& n, const std::string& key) {
         return Integer(n, key, iso.tmp_size_bytes);
       }},
      {"uid_range",
       [&](const toml::node& n, const std::string& key) -> std::optional<PolicyError> {
         const toml::table* t = n.as_table();
         if (!t) return Bad(key, "must be a table {first = N, count = N}");
         if (auto e = OnlyKnown(*t, key + ".", {"first", "count"})) return e;
         int64_t first = 0, count = 0;
         for (auto [name, target] : {std::pair{"first", &first}, std::pair{"count", &count}}) {
           const toml::node* v = t->get(name);
           if (!v) return Bad(key + "." + name, "is missing");
           if (auto e = Integer(*v, key + "." + name, *target)) return e;
           if (*target < 0 || *target > 0xffffffffLL) {
             return Bad(key + "." + name, "must be between 0 and 4294967295");
           }
         }
         iso.id_range = IdRange{static_cast<uint32_t>(first), static_cast<uint32_t>(count)};
         return std::nullopt;
       }},
      {"system_dirs", [&](const toml::node& n,
                          const std::string& key) { return Strings(n, key, iso.system_dirs); }},
      {"hidden_paths", [&](const toml::node& n,
                           const std::string& key) { return Strings(n, key, iso.hidden_paths); }},
      {"seccomp",
       [&](const toml::node& n, const std::string& key) -> std::optional<PolicyError> {
         const toml::table* t = n.as_table();
         if (!t) return Bad(key, "must be a table {deny = [...]}");
         if (auto e = OnlyKnown(*t, key + ".", {"deny"})) return e;
         if (const toml::node* deny = t->get("deny")) {
           return Strings(*deny, key + ".deny", iso.seccomp_deny);
         }
         return std::nullopt;
       }},
      {"timeout_ms", Limit(l.timeout_ms)},
      {"grace_ms",
       [&](const toml::node& n, const std::string& key) { return Integer(n, key, l.grace_ms); }},
      {"output_limit_bytes",
       [&](const toml::node& n, const std::string& key) {
         return Integer(n, key, l.output_limit_bytes);
       }},
      {"memory_bytes", Limit(l.memory_bytes)},
      {"pids", Limit(l.pids)},
      {"cpu_seconds", Limit(l.cpu_seconds)},
      {"file_size_bytes", Limit(l.file_size_bytes)},
      {"open_files", Limit(l.open_files)},
      {"address_space_bytes", Limit(l.address_space_bytes)},
      {"cpu",
       [&](const toml::node& n, const std::string& key) -> std::optional<PolicyError> {
         // CPUs: 0.5 is a float in TOML, 2 an integer; both are meant.
         if (auto v = n.value_exact<double>()) {
           l.cpu = *v;
         } else if (auto i = n.value_exact<int64_t>()) {
           l.cpu = static_cast<double>(*i);
         } else {
           return Bad(key, "must be a number of CPUs (0.5, 2)");
         }
         return std::nullopt;
       }},
  };
  for (const auto& [key, value] : root) {
    auto setter = setters.find(key.str());
    if (setter == setters.end()) return Bad(std::string(key.str()), "unknown key");
    if (auto e = setter->second(value, std::string(key.str()))) return e;
  }
  return std::nullopt;
}

}  // namespace cordon::contain
