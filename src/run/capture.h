// One captured output stream with a byte cap. Past the cap, bytes are
// counted and discarded, never buffered, so memory stays bounded however
// much the child writes: the buffer's capacity never exceeds the cap
// either. The kept bytes end on a UTF-8 character boundary:
// a multi-byte character is never cut in half, at the cap or between chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cordon::run {

class Capture final {
 public:
  explicit Capture(size_t limit) : limit_(limit) {}

  // Takes the next chunk as read from the pipe and returns the bytes newly
  // kept (valid until the next call), for streaming them on. An incomplete
  // UTF-8 sequence at the end of a chunk is held back until the next chunk
  // or Finish.
  std::string_view Append(std::string_view chunk);
  // End of stream: releases any held-back bytes that fit; returns them.
  std::string_view Finish();

  const std::string& data() const { return kept_; }
  // Moves the kept bytes out (for the result: one copy of them, not two).
  std::string Take() { return std::move(kept_); }
  bool truncated() const { return truncated_; }
  uint64_t total_bytes() const { return total_; }  // produced, kept or not

 private:
  std::string_view Keep(std::string_view bytes);

  size_t limit_;
  std::string kept_;
  std::string pending_;  // at most 3 bytes of an unfinished character
  bool truncated_ = false;
  uint64_t total_ = 0;
};

// The length of the longest prefix of `bytes` that does not end inside a
// well-formed but unfinished UTF-8 sequence.
size_t CompletePrefix(std::string_view bytes);

// The largest cut <= `limit` that does not split a UTF-8 sequence of `bytes`.
size_t CutAtBoundary(std::string_view bytes, size_t limit);

}  // namespace cordon::run
