// User, mount, pid, network, IPC and UTS namespaces: whether this caller can
// make them, the id maps of a new user namespace (written by the
// supervisor), an idmapped workspace, and the child-side steps that need
// nothing but a system call (become root inside, hostname, loopback).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "contain/spec.h"
#include "sys/fd.h"

namespace cordon::contain {

// The clone3 flags of a sandbox: user, mount, pid, IPC and UTS namespaces.
// The network namespace is made by the child itself (NewNetwork): it is
// the slowest to make, and made there it overlaps with the supervisor's
// writing of the id maps instead of delaying clone3.
uint64_t SandboxCloneFlags();

struct NamespaceSupport {
  bool available = false;  // a user namespace can be made (the others follow from it)
  std::string problem;     // why not: what was tried and what the kernel said
  bool network = false;    // network namespaces are not switched off (max_net_namespaces)
};

// Tries it: the settings that switch user namespaces off, then a
// short-lived child in a new user namespace.
NamespaceSupport ProbeNamespaces();

// Whether this process may map sandboxes to ids of `range` (root with
// CAP_SETUID/CAP_SETGID, and the range exists in its own user namespace);
// otherwise a sandbox is mapped to the caller's own ids.
bool CanMapIdRange(IdRange range);

// Parent side: maps 0 inside the child's new user namespace to
// `outside_uid`/`outside_gid` and denies setgroups.
sys::Result<void> WriteIdMaps(pid_t child, uint32_t outside_uid, uint32_t outside_gid);

// Parent side, for an idmapped workspace: a detached copy of the mount at
// `path` (open_tree), and the idmapping applied to it (mount_setattr with
// MOUNT_ATTR_IDMAP; needs CAP_SYS_ADMIN where the filesystem was mounted).
// `recursive`: with the mounts beneath it (AT_RECURSIVE).
sys::Result<sys::UniqueFd> DetachedTree(const std::string& path, bool recursive = false);
sys::Result<void> IdmapTree(int tree_fd, int userns_fd);
// A user namespace (as an nsfs descriptor) that maps `inside_uid` to
// `outside_uid` and likewise for gids: what makes a directory owned by
// inside_uid appear owned by the sandbox's root.
sys::Result<sys::UniqueFd> MakeUserNamespace(uint32_t inside_uid, uint32_t outside_uid,
                                             uint32_t inside_gid, uint32_t outside_gid);

// Child side, async-signal-safe; each returns 0 or an errno value.
// Waits for one byte from the supervisor on `fd`; EOF (it gave up, or is
// gone) is ECANCELED.
int AwaitByte(int fd);
// Waits until the supervisor wrote the id maps (AwaitByte on `sync_fd`),
// then becomes uid and gid 0 of the namespace.
int AwaitIdMaps(int sync_fd);
int SetHostname(const char* name);
// A new network namespace (the child holds CAP_NET_ADMIN in its user
// namespace from the start, mapped or not) with `lo` up: it starts down.
int NewNetwork();

}  // namespace cordon::contain
