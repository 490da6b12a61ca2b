#include "proc/signal_identity.h"

#include "proc/stat.h"
#include "sys/fd.h"
#include "sys/pidfd.h"

namespace cordon::proc {

bool PidFdInfoAlive(std::string_view fdinfo) {
  size_t at = fdinfo.find("\nPid:");
  if (at == std::string_view::npos) return false;
  std::string_view rest = fdinfo.substr(at + 5);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  return !rest.starts_with("-1");
}

bool PidFdAlive(int pidfd) {
  auto info = sys::ReadFile("/proc/self/fdinfo/" + std::to_string(pidfd), 4096);
  return info && PidFdInfoAlive(*info);
}

sys::Result<Mismatch> SignalIdentity(const Identity& expected, int sig, bool check_parent) {
  auto boot = BootId();
  if (!boot) return std::unexpected(boot.error());
  if (*boot != expected.boot_id) return Mismatch::kWrongBoot;

  auto pinned = sys::PidFd::Open(expected.pid);
  if (!pinned) {
    if (pinned.error().errno_value() == ESRCH) return Mismatch::kGone;
    return std::unexpected(pinned.error());
  }
  // From here on the pid cannot be given to another process while we look:
  // what /proc shows for it is the pinned process (or nothing).
  auto st = ReadStat(expected.pid);
  if (!st || st->exited()) return Mismatch::kGone;
  if (st->start_ticks != expected.start_ticks) return Mismatch::kPidReused;
  if (check_parent && st->ppid != expected.ppid) return Mismatch::kParentChanged;
  if (!PidFdAlive(pinned->fd())) return Mismatch::kGone;
  if (auto sent = pinned->SendSignal(sig); !sent) {
    if (sent.error().errno_value() == ESRCH) return Mismatch::kGone;
    return std::unexpected(sent.error());
  }
  return Mismatch::kNone;
}

}  // namespace cordon::proc
