// A Jupyter websocket client's frame on /api/kernels/{id}/channels
// (gateway::ParseClientMessage / ParseClientFrame, what Relay::FromClient
// runs on it), text and binary, in both protocols.
#include "fuzz_support.h"
#include "gateway/client_message.h"

namespace {

using namespace cordon;

// One parse of the input: the invariants of what the relay forwards.
int Check(const std::expected<gateway::ClientMessage, gateway::ClientRefusal>& parsed) {
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
  CORDON_FUZZ_CHECK(again->buffers == m.buffers);
  // And back to a client, in both protocols: what it frames decodes again.
  for (auto protocol : {gateway::Protocol::kDefault, gateway::Protocol::kV1}) {
    gateway::ClientFrame frame = gateway::FrameForClient("shell", m, protocol);
    if (!frame.binary) continue;
    auto back = gateway::ParseClientFrame(frame.bytes, true, protocol);
    CORDON_FUZZ_CHECK(back && back->message.buffers == m.buffers);
  }
  return 0;
}

}  // namespace

// The same bytes as a text frame, and as a binary frame of each protocol
// (jupyter/ws_framing.h: counts and offsets that do not fit the frame).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(gateway::ParseClientMessage(std::string(fuzz::Text(data, size))));
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check(gateway::ParseClientFrame(bytes, true, gateway::Protocol::kDefault));
  Check(gateway::ParseClientFrame(bytes, true, gateway::Protocol::kV1));
  return 0;
}
