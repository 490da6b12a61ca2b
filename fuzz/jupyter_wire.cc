// ZeroMQ multipart frames from a kernel (jupyter::Parse), with their HMAC.
// The input is the key, then the frames, separated by "|":
//
//   secret|identity|<IDS|MSG>|signature|{header}|{parent}|{metadata}|{content}|buffer
//
// A fuzzer cannot forge HMAC-SHA256, so the input is parsed twice: as it is
// (a bad signature is refused), and re-signed with the key, which takes the
// parts' JSON the rest of the way. A message that verifies survives
// Serialize and Parse unchanged.
#include "fuzz_support.h"
#include "jupyter/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  std::vector<std::string> parts = fuzz::Split(fuzz::Text(data, size), "|");
  const std::string key = parts.front();
  std::vector<std::string> frames(parts.begin() + 1, parts.end());

  auto as_is = jupyter::Parse(frames, key);
  size_t delim = 0;
  while (delim < frames.size() && frames[delim] != "<IDS|MSG>") ++delim;
  // "|" separates the input's frames, so the delimiter is spelled "<IDS>".
  if (delim == frames.size()) {
    for (delim = 0; delim < frames.size() && frames[delim] != "<IDS>"; ++delim) {
    }
    if (delim < frames.size()) frames[delim] = "<IDS|MSG>";
  }
  if (delim + 6 <= frames.size()) {
    frames[delim + 1] = jupyter::Sign(
        key, {frames[delim + 2], frames[delim + 3], frames[delim + 4], frames[delim + 5]});
  }
  auto signed_message = jupyter::Parse(frames, key);
  if (as_is) CORDON_FUZZ_CHECK(signed_message.has_value());
  if (!signed_message) return 0;
  const jupyter::Message& m = *signed_message;
  CORDON_FUZZ_CHECK(m.header.is_object());
  (void)m.msg_id();
  (void)m.msg_type();
  (void)m.parent_msg_id();
  // A wrong key refuses it (unless there is no signature to check).
  if (!key.empty()) CORDON_FUZZ_CHECK(!jupyter::Parse(frames, key + "x"));
  auto again = jupyter::Parse(jupyter::Serialize(m, key), key);
  CORDON_FUZZ_CHECK(again);
  CORDON_FUZZ_CHECK(again->identities == m.identities && again->header == m.header &&
                    again->parent_header == m.parent_header && again->metadata == m.metadata &&
                    again->content == m.content && again->buffers == m.buffers);
  return 0;
}
