// Process identity: (pid, ppid, start ticks, boot id). Two observations with
// the same pid, start ticks and boot id are the same process; a recycled pid
// has other start ticks, and after a reboot every pid is someone else's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sys/error.h"

namespace cordon::proc {

struct Identity {
  pid_t pid = 0;
  pid_t ppid = 0;
  uint64_t start_ticks = 0;
  std::string boot_id;

  bool operator==(const Identity&) const = default;
};

// Why an observed process is not the expected one.
enum class Mismatch {
  kNone,           // the same process, still there
  kGone,           // no process has that pid (or it has exited)
  kPidReused,      // the pid now belongs to a process started at another time
  kWrongBoot,      // the identity was taken during another boot
  kParentChanged,  // the same process, but its parent is not the pinned one
};

std::string_view MismatchName(Mismatch m);

// {"pid", "ppid", "start_ticks", "boot_id"}: the one shape every command
// prints and accepts.
nlohmann::json ToJson(const Identity& identity);
// Parses that shape; the error names the offending key. Extra keys are errors.
std::expected<Identity, std::string> IdentityFromJson(const nlohmann::json& value);
std::expected<Identity, std::string> IdentityFromJsonText(std::string_view text);

// /proc/sys/kernel/random/boot_id, read once per process.
sys::Result<std::string> BootId();

// Observes `pid` now.
sys::Result<Identity> ReadIdentity(pid_t pid);

// Observes `expected.pid` now and compares. `check_parent` also requires the
// same parent (for callers that pinned it).
Mismatch Verify(const Identity& expected, bool check_parent = false);

}  // namespace cordon::proc
