#include "proc/identity.h"

#include "proc/stat.h"
#include "sys/fd.h"

namespace cordon::proc {

std::string_view MismatchName(Mismatch m) {
  switch (m) {
    case Mismatch::kNone:
      return "none";
    case Mismatch::kGone:
      return "gone";
    case Mismatch::kPidReused:
      return "pid_reused";
    case Mismatch::kWrongBoot:
      return "wrong_boot";
    case Mismatch::kParentChanged:
      return "parent_changed";
  }
  return "unknown";
}

nlohmann::json ToJson(const Identity& id) {
  return {
      {"pid", id.pid}, {"ppid", id.ppid}, {"start_ticks", id.start_ticks}, {"boot_id", id.boot_id}};
}

std::expected<Identity, std::string> IdentityFromJson(const nlohmann::json& v) {
  if (!v.is_object()) return std::unexpected("an identity is a JSON object");
  for (const auto& [key, value] : v.items()) {
    if (key != "pid" && key != "ppid" && key != "start_ticks" && key != "boot_id") {
      return std::unexpected("unknown key \"" + key + "\" in the identity");
    }
  }
  Identity id;
  auto integer = [&](const char* key, int64_t min,
                     int64_t max) -> std::expected<int64_t, std::string> {
    if (!v.contains(key)) return std::unexpected(std::string("missing \"") + key + "\"");
    const auto& x = v[key];
    // A boolean is not a number, nor is 1.5.
    if (!x.is_number_integer())
      return std::unexpected(std::string("\"") + key + "\" must be an integer");
    int64_t n = x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                    ? -1
                    : x.get<int64_t>();
    if (n < min || n > max) return std::unexpected(std::string("\"") + key + "\" is out of range");
    return n;
  };
  auto pid = integer("pid", 1, INT32_MAX);
  if (!pid) return std::unexpected(pid.error());
  auto ppid = integer("ppid", 0, INT32_MAX);
  if (!ppid) return std::unexpected(ppid.error());
  auto ticks = integer("start_ticks", 0, INT64_MAX);
  if (!ticks) return std::unexpected(ticks.error());
  if (!v.contains("boot_id") || !v["boot_id"].is_string() ||
      v["boot_id"].get<std::string>().empty()) {
    return std::unexpected("\"boot_id\" must be a non-empty string");
  }
  id.pid = static_cast<pid_t>(*pid);
  id.ppid = static_cast<pid_t>(*ppid);
  id.start_ticks = static_cast<uint64_t>(*ticks);
  id.boot_id = v["boot_id"].get<std::string>();
  return id;
}

std::expected<Identity, std::string> IdentityFromJsonText(std::string_view text) {
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::unexpected("the identity is not valid JSON");
  return IdentityFromJson(parsed);
}

sys::Result<std::string> BootId() {
  static const sys::Result<std::string> boot_id = []() -> sys::Result<std::string> {
    CORDON_ASSIGN_OR_RETURN(std::string text,
                            sys::ReadFile("/proc/sys/kernel/random/boot_id", 128));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.empty()) return sys::Fail("/proc/sys/kernel/random/boot_id is empty", EINVAL);
    return text;
  }();
  return boot_id;
}

sys::Result<Identity> ReadIdentity(pid_t pid) {
  CORDON_ASSIGN_OR_RETURN(std::string boot_id, BootId());
  CORDON_ASSIGN_OR_RETURN(Stat st, ReadStat(pid));
  return Identity{
      .pid = st.pid, .ppid = st.ppid, .start_ticks = st.start_ticks, .boot_id = std::move(boot_id)};
}

Mismatch Verify(const Identity& expected, bool check_parent) {
  auto boot_id = BootId();
  if (!boot_id || *boot_id != expected.boot_id) return Mismatch::kWrongBoot;
  auto st = ReadStat(expected.pid);
  if (!st || st->exited()) return Mismatch::kGone;
  if (st->start_ticks != expected.start_ticks) return Mismatch::kPidReused;
  if (check_parent && st->ppid != expected.ppid) return Mismatch::kParentChanged;
  return Mismatch::kNone;
}

}  // namespace cordon::proc
