// Verifying a closure directory against its pinned manifest.
//
// Each listed file must be, at verification time: a regular file reached
// without any symbolic link, with no w bit in its mode (a writable file is
// mutable; judged from the mode, not access(2), which root would pass), the
// listed size, SHA-256 and executable bit (the user x bit), and the same
// inode with the same size, mtime and ctime before and after it was read.
//
// Files, symlinks and directories present but not listed are reported as
// `unlisted` and FAIL verification, because their mere presence can change
// what a closure does (a Python namespace package is just a directory).
// VerifyOptions::allow_unlisted opts out; they are still reported.
//
// The verified files stay open: a later step runs a closure file from its
// fd (execveat(AT_EMPTY_PATH)), so what runs is the inode that was checked,
// whatever happens to the names afterwards. The fd pins the inode, not its
// bytes: its owner (or root) could still chmod it and write. Keep closures
// in directories only trusted users can write to.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "closure/manifest.h"
#include "closure/rule.h"
#include "sys/error.h"
#include "sys/fd.h"

namespace cordon::closure {

struct VerifyOptions {
  // Pass even when the directory holds files the manifest does not list
  // (they are still reported in Verification::unlisted). Off by default.
  bool allow_unlisted = false;
};

struct VerifiedFile {
  std::string path;  // as listed
  sys::UniqueFd fd;  // O_RDONLY | O_CLOEXEC, the inode that was verified
};

struct Verification {
  // Entries' failures in manifest order, then parts of the directory that
  // could not be listed (unreadable: they may hide unlisted files), then
  // unlisted paths (unless allowed). A pin mismatch is the only failure
  // reported when it occurs: no file is checked against a manifest that is
  // not the pinned one.
  std::vector<Failure> failures;
  // Present but not listed, sorted; a directory none of whose contents is
  // listed is reported once, as "dir/".
  std::vector<std::string> unlisted;
  // One per entry, in manifest order, when ok(); empty otherwise, so that
  // no fd of a failed closure can be used by mistake.
  std::vector<VerifiedFile> files;

  bool ok() const { return failures.empty(); }
  // The verified fd of `path`, or -1. Owned by this Verification.
  int FdFor(std::string_view path) const;
};

// Verifies `dir` against `manifest` pinned by `pin`. Fails with an Error only
// when `dir` itself cannot be opened as a directory; everything about the
// closure's contents is a Failure in the Verification.
sys::Result<Verification> VerifyClosure(const std::string& dir, const Manifest& manifest,
                                        std::string_view pin, const VerifyOptions& options = {});

// Verifies one entry beneath `dir_fd` and keeps its fd. Every failure found
// for it is returned (e.g. writable and digest_mismatch together); a file
// that cannot be opened as a regular file yields exactly one.
std::expected<sys::UniqueFd, std::vector<Failure>> VerifyEntry(int dir_fd, const Entry& entry);

// {"ok": bool, "failures": [{"rule", "path", "message"}], "unlisted": [...]}
nlohmann::json ToJson(const Verification& verification);

}  // namespace cordon::closure
