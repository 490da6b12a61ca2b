// Making a manifest from a directory tree.
#pragma once

#include <string>
#include <vector>

#include "closure/manifest.h"
#include "closure/rule.h"
#include "sys/error.h"

namespace cordon::closure {

struct MadeManifest {
  // Every regular file beneath the directory, sorted by path.
  Manifest manifest;
  // What a manifest cannot hold, one per path: symlinks (symlink), devices,
  // FIFOs and sockets (not_regular), directories with no file beneath them
  // (empty_directory), names no manifest path may have (path_*, bad_path),
  // files that could not be read or changed while read, and no files at all
  // (empty_entries). Nothing is skipped silently: `manifest` describes the
  // directory only when this is empty.
  std::vector<Failure> problems;
  // Listed files with a w bit set. The manifest does not record modes other
  // than the x bit, but verification refuses a writable file: these must be
  // made read-only (chmod a-w) wherever the closure is verified.
  std::vector<std::string> writable;

  bool ok() const { return problems.empty(); }
};

// Walks `dir` recursively without following symlinks and hashes every
// regular file. Fails with an Error only when `dir` cannot be opened as a
// directory.
sys::Result<MadeManifest> MakeManifest(const std::string& dir);

}  // namespace cordon::closure
