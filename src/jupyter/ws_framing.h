// The two ways a Jupyter server frames kernel messages on a websocket
// (jupyter_server's services/kernels/connection, @jupyterlab/services'
// kernel/serialize), as bytes: pure functions, no socket, no JSON parsing.
//
// Default protocol (no subprotocol agreed): a message without buffers is
// one JSON text frame; one with buffers is a binary frame
//   uint32 n (big-endian), n uint32 offsets (big-endian, from the frame's
//   start), then n parts: the JSON message (without "buffers"), then the
//   buffers; each part runs to the next offset, the last to the end.
//
// `v1.kernel.websocket.jupyter.org`: every message is a binary frame
//   uint64 n (little-endian), n uint64 offsets (little-endian), then the
//   channel name, header, parent_header, metadata and content (JSON) and the
//   buffers; part i runs from offset i to offset i+1, so n is 6 + buffers.
//
// Decoding trusts nothing: every count and offset is checked against the
// frame before anything is read, and the parts are views into it.
#pragma once

#include <array>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::jupyter {

inline constexpr std::string_view kWsProtocolV1 = "v1.kernel.websocket.jupyter.org";

// The default protocol's binary frame. Encoding: the frame must stay under
// 4 GiB (its offsets are uint32s; the relay's message limit is far lower).
struct BinaryJsonFrame {
  std::string_view json;  // the message, a JSON object without "buffers"
  std::vector<std::string_view> buffers;
};
std::string EncodeBinaryJson(std::string_view json, const std::vector<std::string>& buffers);
// The error says what is wrong with the frame ("offsets: ...").
std::expected<BinaryJsonFrame, std::string> DecodeBinaryJson(std::string_view frame);

// A v1 frame.
struct V1Frame {
  std::string_view channel;
  // header, parent_header, metadata, content: JSON texts, unparsed.
  std::array<std::string_view, 4> parts;
  std::vector<std::string_view> buffers;
};
std::string EncodeV1(std::string_view channel, const std::array<std::string_view, 4>& parts,
                     const std::vector<std::string>& buffers);
std::expected<V1Frame, std::string> DecodeV1(std::string_view frame);

}  // namespace cordon::jupyter
