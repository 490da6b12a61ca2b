// Giving up privileges in the child: capabilities (bounding, ambient,
// inheritable, permitted, effective) and the way back to them (securebits),
// and no_new_privs. Child side, async-signal-safe; each returns 0 or an
// errno value.
#pragma once

#include <cstdint>

namespace cordon::contain {

// Ids for a sandbox without a user namespace to become (root's, which
// would otherwise keep uid 0 on the host).
struct OwnIds {
  uint32_t uid;
  uint32_t gid;
};

// Drops every capability. Where the process holds CAP_SETPCAP (root of a
// sandbox's user namespace, or the host's root) it also empties the
// bounding set and locks securebits so that uid 0 gains nothing at
// execve; without it (an unprivileged caller with no user namespace)
// there is nothing to gain that no_new_privs does not already stop.
// `become`: also clear the supplementary groups and become these ids for
// good (real, effective and saved), before the last capability goes.
int DropCapabilities(const OwnIds* become = nullptr);

// prctl(PR_SET_NO_NEW_PRIVS): execve never grants privileges (setuid,
// file capabilities). Landlock and an unprivileged seccomp filter need it.
int SetNoNewPrivs();

// keyctl(KEYCTL_JOIN_SESSION_KEYRING): a session keyring of the sandbox's
// own, new and empty. Keys are not namespaced: the caller's session
// keyring, inherited, would leave its keys in the command's possession,
// and /proc/keys lists every key its reader may view. (0 where keys are
// not to be had: see privileges.cc.)
int NewSessionKeyring();

}  // namespace cordon::contain
