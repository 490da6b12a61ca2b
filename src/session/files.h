// The files of a session's workspace, as the API serves them. Every path is
// relative to the workspace and resolved by the kernel with openat2(
// RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from the workspace's descriptor:
// "..", absolute paths and symbolic links that lead outside are refused and
// nothing outside is read or written, even if a session's process swaps a
// component for a link meanwhile.
//
// Uploads: without an offset the body becomes the whole file, written to a
// temporary name beside it and renamed into place only once complete and
// verified, so a failed upload never leaves a partial file and never
// damages the previous one. With ?offset=N (N = the file's current size)
// the body is appended, so large files go in several requests; the digest
// header is then that of the whole file so far, and on a mismatch the file
// is removed: a chunked upload that does not verify leaves nothing behind.
//
// Files are created 0644 and directories 0755 with the daemon's owner, the
// same uid as the session's processes in this build (no user namespace
// yet), so they can read and change them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "session/error.h"

namespace cordon::session {

// Refuses what RESOLVE_BENEATH would also refuse, earlier and with a clearer
// message: empty, absolute, NUL, and "", "." or ".." components.
std::optional<Error> CheckRelativePath(std::string_view path, const std::string& field);

struct FileInfo {
  uint64_t size = 0;
  std::string sha256;
  int64_t mtime_ms = 0;
};

struct PutRequest {
  std::string path;
  std::optional<uint64_t> offset;     // append here (must equal the current size)
  std::optional<std::string> sha256;  // of the whole file after this request
  uint64_t max_bytes = 0;             // the largest file allowed
};

Outcome<FileInfo> PutFile(int workspace_fd, const PutRequest& request, std::string_view body);

// Reads a regular file whole (up to `max_bytes`) with its digest; with
// `body` false only its size and digest (HEAD).
struct FileContent {
  FileInfo info;
  std::string body;
};
Outcome<FileContent> GetFile(int workspace_fd, const std::string& path, bool body,
                             uint64_t max_bytes);

// Removes a file, a symbolic link (not its target) or an empty directory.
Outcome<void> DeleteFile(int workspace_fd, const std::string& path);

// [{"name", "type": "file"|"directory"|"symlink"|"other", "size", "mtime_ms"}]
// of a directory ("" or "." for the workspace itself).
Outcome<nlohmann::json> ListFiles(int workspace_fd, const std::string& dir);

}  // namespace cordon::session
