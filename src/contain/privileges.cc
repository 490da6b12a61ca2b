#include "contain/privileges.h"

#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace cordon::contain {

int DropCapabilities(const OwnIds* become) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return errno;
  bool setpcap = (data[0].effective & (1u << CAP_SETPCAP)) != 0;
  if (setpcap) {
    // Root gets no capabilities at execve, set-uid fix-ups are off, and
    // none of it can be switched back on.
    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                         SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return errno;
    for (int cap = 0; cap < 64; ++cap) {
      if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
        if (errno == EINVAL) break;  // past the kernel's last capability
        return errno;
      }
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return errno;
  }
  // With SECBIT_NO_SETUID_FIXUP set, leaving uid 0 takes no capability
  // away on its own: CAP_SETUID stays until the capset below. The raw
  // calls change this thread alone, which is the whole process here.
  if (become != nullptr && (::syscall(SYS_setgroups, 0, nullptr) != 0 ||
                            ::syscall(SYS_setresgid, become->gid, become->gid, become->gid) != 0 ||
                            ::syscall(SYS_setresuid, become->uid, become->uid, become->uid) != 0)) {
    return errno;
  }
  struct __user_cap_data_struct none[2] = {};
  return ::syscall(SYS_capset, &header, none) == 0 ? 0 : errno;
}

int SetNoNewPrivs() { return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : errno; }

int NewSessionKeyring() {
  if (::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr) >= 0) return 0;
  // Not an error to stop a launch for: ENOSYS, a kernel without keys;
  // EPERM, a container's filter that refuses keyctl (Docker's and
  // containerd's defaults), which its runtime gave a session keyring of
  // its own; EDQUOT, the per-uid key quota (200 by default) full, which
  // only a uid that many sandboxes share can reach: the caller's own,
  // whose keys are its sandboxes' to view anyway. A sandbox's own uid, as
  // root's leased ones, starts with an empty quota.
  return errno == ENOSYS || errno == EPERM || errno == EDQUOT ? 0 : errno;
}

}  // namespace cordon::contain
