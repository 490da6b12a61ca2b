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
