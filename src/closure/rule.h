// Why a manifest or a closure was refused. Each reason has a stable
// snake_case code (the CLI's --json, the daemon's API and tests match on it)
// and every failure carries a message naming the entry or path.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cordon::closure {

enum class Rule {
  // Manifest shape.
  kInvalidJson,      // invalid_json: not JSON (or not UTF-8)
  kNotObject,        // not_object: the top level is not an object
  kNoEntries,        // no_entries: no "entries" key
  kEntriesNotArray,  // entries_not_array
  kEmptyEntries,     // empty_entries: a closure of nothing pins nothing
  kEntryNotObject,   // entry_not_object
  kDuplicateKey,     // duplicate_key: parsers disagree on which value wins
  kExtraKey,         // extra_key: at the top level or in an entry
  // Paths.
  kBadPath,           // bad_path: missing, not a string, or not UTF-8
  kPathAbsolute,      // path_absolute
  kPathTraversal,     // path_traversal: a ".." segment
  kPathDotSegment,    // path_dot_segment: a "." segment would alias another path
  kPathEmptySegment,  // path_empty_segment: "", "a//b", "a/"
  kPathNul,           // path_nul: a NUL byte would truncate the path in a system call
  kPathReserved,      // path_reserved: starts with ".cordon"
  kPathConflict,      // path_conflict: "a" and "a/b" cannot both be files
  kDuplicatePath,     // duplicate_path
  kUnsorted,          // unsorted: not strictly ascending by bytes
  // Entry fields.
  kBadSize,        // bad_size: not a non-negative integer
  kBadExecutable,  // bad_executable: not a boolean
  kBadSha256,      // bad_sha256: not 64 lowercase hex digits
  // The pin.
  kClosurePin,  // closure_pin: the manifest's canonical digest is not the pin
  // Files on disk.
  kMissing,              // missing
  kSymlink,              // symlink: the path or one of its directories is a symbolic link
  kNotRegular,           // not_regular: a directory, device, FIFO or socket
  kWritable,             // writable: a w bit is set, so the file is mutable
  kSizeMismatch,         // size_mismatch
  kDigestMismatch,       // digest_mismatch
  kExecutableMismatch,   // executable_mismatch: the user x bit differs
  kChangedWhileReading,  // changed_while_reading: the inode changed during the check
  kUnreadable,           // unreadable: open or read failed for another reason
  kUnlisted,             // unlisted: present in the directory, not in the manifest
  kEmptyDirectory,       // empty_directory: a manifest cannot express it (make only)
  // Running a closure:
  kNotInClosure,  // not_in_closure: the program is not one of the verified files
};

// The stable code: "path_traversal".
std::string_view RuleName(Rule rule);

struct Failure {
  Rule rule;
  std::string path;     // the entry's or file's path relative to the closure; may be empty
  std::string message;  // names the entry or path and what is wrong with it
};

// {"rule": "...", "path": "...", "message": "..."}
nlohmann::json ToJson(const Failure& failure);

}  // namespace cordon::closure
