#include "closure/rule.h"

namespace cordon::closure {

std::string_view RuleName(Rule rule) {
  switch (rule) {
    case Rule::kInvalidJson:
      return "invalid_json";
    case Rule::kNotObject:
      return "not_object";
    case Rule::kNoEntries:
      return "no_entries";
    case Rule::kEntriesNotArray:
      return "entries_not_array";
    case Rule::kEmptyEntries:
      return "empty_entries";
    case Rule::kEntryNotObject:
      return "entry_not_object";
    case Rule::kDuplicateKey:
      return "duplicate_key";
    case Rule::kExtraKey:
      return "extra_key";
    case Rule::kBadPath:
      return "bad_path";
    case Rule::kPathAbsolute:
      return "path_absolute";
    case Rule::kPathTraversal:
      return "path_traversal";
    case Rule::kPathDotSegment:
      return "path_dot_segment";
    case Rule::kPathEmptySegment:
      return "path_empty_segment";
    case Rule::kPathNul:
      return "path_nul";
    case Rule::kPathReserved:
      return "path_reserved";
    case Rule::kPathConflict:
      return "path_conflict";
    case Rule::kDuplicatePath:
      return "duplicate_path";
    case Rule::kUnsorted:
      return "unsorted";
    case Rule::kBadSize:
      return "bad_size";
    case Rule::kBadExecutable:
      return "bad_executable";
    case Rule::kBadSha256:
      return "bad_sha256";
    case Rule::kClosurePin:
      return "closure_pin";
    case Rule::kMissing:
      return "missing";
    case Rule::kSymlink:
      return "symlink";
    case Rule::kNotRegular:
      return "not_regular";
    case Rule::kWritable:
      return "writable";
    case Rule::kSizeMismatch:
      return "size_mismatch";
    case Rule::kDigestMismatch:
      return "digest_mismatch";
    case Rule::kExecutableMismatch:
      return "executable_mismatch";
    case Rule::kChangedWhileReading:
      return "changed_while_reading";
    case Rule::kUnreadable:
      return "unreadable";
    case Rule::kUnlisted:
      return "unlisted";
    case Rule::kEmptyDirectory:
      return "empty_directory";
    case Rule::kNotInClosure:
      return "not_in_closure";
  }
  return "unknown";
}

nlohmann::json ToJson(const Failure& failure) {
  return {{"rule", RuleName(failure.rule)}, {"path", failure.path}, {"message", failure.message}};
}

}  // namespace cordon::closure
