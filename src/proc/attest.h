// Attestation: given the identity of a process cordon launched (the root),
// find the descendant that matches every expectation and prove its ancestry
// back to the root, as a chain of identities. What a process says about
// itself (its title) is only a filter; what it runs (the digest or closure
// membership of its executable) and where (its cwd) are checked, and so is
// every link of the chain.
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "closure/verify.h"
#include "proc/identity.h"

namespace cordon::proc {

struct AttestExpectations {
  // argv[0] as the process shows it now (a program may rewrite it).
  std::optional<std::string> title;
  // The SHA-256 of its executable...
  std::optional<std::string> exe_sha256;
  // ...or membership of this verified closure (by inode).
  const closure::Verification* closure = nullptr;
  std::optional<std::string> cwd;
  // That very process, instead of searching the root's descendants.
  std::optional<Identity> target;
};

struct AttestFailure {
  // root_changed, target_changed, not_descendant, no_matching_child,
  // ambiguous_child, snapshot_digest, wrong_cwd, fd_exec_unpinned, unreadable
  std::string reason;
  std::string message;
};

// The chain of identities from the target up to the root, target first.
std::expected<std::vector<Identity>, AttestFailure> Attest(const Identity& root,
                                                           const AttestExpectations& expect);

// argv of a live process, from /proc/PID/cmdline.
std::vector<std::string> ReadArgv(pid_t pid);

}  // namespace cordon::proc
