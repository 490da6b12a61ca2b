#include "run/capture.h"

#include <algorithm>

namespace cordon::run {
namespace {

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// The length of the sequence a lead byte starts; 0 if it is not a lead.
size_t SequenceLength(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t CompletePrefix(std::string_view bytes) {
  // Look back at most 3 bytes for the lead byte of the last sequence.
  size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(bytes[n - back]);
    if (IsContinuation(c)) continue;
    size_t len = SequenceLength(c);
    return (len > back) ? n - back : n;  // unfinished: hold it back
  }
  return n;
}

size_t CutAtBoundary(std::string_view bytes, size_t limit) {
  if (limit >= bytes.size()) return bytes.size();
  // Back off over continuation bytes to the start of the sequence the cut
  // falls into; give up (cut at `limit`) if the data is not UTF-8 there.
  for (size_t back = 0; back <= 3 && back <= limit; ++back) {
    if (!IsContinuation(static_cast<unsigned char>(bytes[limit - back]))) return limit - back;
  }
  return limit;
}

std::string_view Capture::Keep(std::string_view bytes) {
  size_t room = limit_ - kept_.size();
  size_t take = bytes.size();
  if (take > room) {
    take = CutAtBoundary(bytes, room);
    truncated_ = true;
  }
  size_t before = kept_.size();
  // Grown geometrically as a string does, but never past the cap: a 10 MiB
  // cap costs 10 MiB, not the 16 MiB that doubling would reach. (reserve()
  // itself doubles at least, so the last step is made by hand.)
  if (before + take > kept_.capacity() && 2 * kept_.capacity() > limit_) {
    std::string grown;
    grown.reserve(std::max(limit_, before + take));
    grown.append(kept_);
    kept_.swap(grown);
  }
  kept_.append(bytes.substr(0, take));
  return std::string_view(kept_).substr(before);
}

std::string_view Capture::Append(std::string_view chunk) {
  total_ += chunk.size();
  if (truncated_) return {};
  std::string joined;
  std::string_view bytes = chunk;
  if (!pending_.empty()) {
    joined = pending_ + std::string(chunk);
    bytes = joined;
    pending_.clear();
  }
  size_t complete = CompletePrefix(bytes);
  std::string_view kept = Keep(bytes.substr(0, complete));
  if (!truncated_) pending_.assign(bytes.substr(complete));
  return kept;
}

std::string_view Capture::Finish() {
  if (truncated_ || pending_.empty()) return {};
  std::string rest = std::move(pending_);
  pending_.clear();
  // An unfinished sequence at the very end is invalid UTF-8, but it is what
  // the child wrote: keep it if it fits (JSON output replaces it).
  return Keep(rest);
}

}  // namespace cordon::run
