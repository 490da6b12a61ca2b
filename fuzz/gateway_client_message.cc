// A Jupyter websocket client's text frame on /api/kernels/{id}/channels
// (gateway::ParseClientMessage, what Relay::FromClient runs on it).
#include "fuzz_support.h"
#include "gateway/client_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto parsed = gateway::ParseClientMessage(std::string(fuzz::Text(data, size)));
  if (!parsed) {
    CORDON_FUZZ_CHECK(!parsed.error().why.empty());
    CORDON_FUZZ_CHECK(parsed.error().parent.is_object());
    return 0;
  }
  CORDON_FUZZ_CHECK(parsed->channel != jupyter::Channel::kIopub);
  const auto& m = parsed->message;
  CORDON_FUZZ_CHECK(m.header.is_object() && m.header["msg_type"].is_string());
  CORDON_FUZZ_CHECK(m.header["msg_id"].is_string());
  CORDON_FUZZ_CHECK(m.parent_header.is_object() && m.metadata.is_object() && m.content.is_object());
  // What the relay then does with it: msg_id is read as a string, and the
  // message is signed and framed for the kernel.
  (void)m.msg_id();
  (void)m.msg_type();
  (void)m.parent_msg_id();
  auto frames = jupyter::Serialize(m, "key");
  auto again = jupyter::Parse(frames, "key");
  CORDON_FUZZ_CHECK(again && again->header == m.header && again->content == m.content);
  return 0;
}
