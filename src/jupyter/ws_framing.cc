#include "jupyter/ws_framing.h"

#include <cstdint>

namespace cordon::jupyter {
namespace {

void PutBigEndian32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

void PutLittleEndian64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t BigEndian32(std::string_view bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

uint64_t LittleEndian64(std::string_view bytes, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return v;
}

std::unexpected<std::string> Bad(std::string why) { return std::unexpected(std::move(why)); }

// Offsets must not go back, and must stay within the frame, from the end
// of the offset table on.
std::expected<void, std::string> CheckOffsets(const std::vector<uint64_t>& offsets,
                                              uint64_t table_end, uint64_t size) {
  uint64_t previous = table_end;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] < previous) {
      const std::string before =
          i == 0 ? "the end of the offset table" : "offset " + std::to_string(i - 1);
      return Bad("offsets: offset " + std::to_string(i) + " (" + std::to_string(offsets[i]) +
                 ") is before " + before + " (" + std::to_string(previous) +
                 "); parts must follow each other");
    }
    if (offsets[i] > size) {
      return Bad("offsets: offset " + std::to_string(i) + " (" + std::to_string(offsets[i]) +
                 ") is past the frame's end (" + std::to_string(size) + " bytes)");
    }
    previous = offsets[i];
  }
  return {};
}

}  // namespace

std::string EncodeBinaryJson(std::string_view json, const std::vector<std::string>& buffers) {
  const size_t n = 1 + buffers.size();
  size_t size = 4 * (n + 1) + json.size();
  for (const auto& b : buffers) size += b.size();
  std::string out;
  out.reserve(size);
  PutBigEndian32(out, static_cast<uint32_t>(n));
  uint64_t offset = 4 * (n + 1);
  PutBigEndian32(out, static_cast<uint32_t>(offset));
  offset += json.size();
  for (size_t i = 0; i + 1 < buffers.size(); ++i) {
    PutBigEndian32(out, static_cast<uint32_t>(offset));
    offset += buffers[i].size();
  }
  if (!buffers.empty()) PutBigEndian32(out, static_cast<uint32_t>(offset));
  out.append(json);
  for (const auto& b : buffers) out.append(b);
  return out;
}

std::expected<BinaryJsonFrame, std::string> DecodeBinaryJson(std::string_view frame) {
  if (frame.size() < 8) {
    return Bad(
        "a binary frame must begin with a part count and at least one offset "
        "(big-endian uint32s); this one has " +
        std::to_string(frame.size()) + " bytes");
  }
  const uint64_t n = BigEndian32(frame, 0);
  if (n == 0) return Bad("offsets: the part count is 0; the JSON message is part 0");
  const uint64_t table_end = 4 * (n + 1);
  if (table_end > frame.size()) {
    return Bad("offsets: " + std::to_string(n) + " parts need an offset table of " +
               std::to_string(table_end) + " bytes; the frame has " + std::to_string(frame.size()));
  }
  std::vector<uint64_t> offsets(n);
  for (uint64_t i = 0; i < n; ++i) offsets[i] = BigEndian32(frame, 4 * (i + 1));
  if (auto ok = CheckOffsets(offsets, table_end, frame.size()); !ok) {
    return std::unexpected(ok.error());
  }
  BinaryJsonFrame out;
  auto part = [&](uint64_t i) {
    const uint64_t end = i + 1 < n ? offsets[i + 1] : frame.size();
    return frame.substr(offsets[i], end - offsets[i]);
  };
  out.json = part(0);
  out.buffers.reserve(n - 1);
  for (uint64_t i = 1; i < n; ++i) out.buffers.push_back(part(i));
  return out;
}

std::string EncodeV1(std::string_view channel, const std::array<std::string_view, 4>& parts,
                     const std::vector<std::string>& buffers) {
  const size_t n = 6 + buffers.size();
  std::vector<uint64_t> offsets;
  offsets.reserve(n);
  offsets.push_back(8 * (n + 1));
  offsets.push_back(offsets.back() + channel.size());
  for (std::string_view p : parts) offsets.push_back(offsets.back() + p.size());
  for (const auto& b : buffers) offsets.push_back(offsets.back() + b.size());
  std::string out;
  out.reserve(offsets.back());
  PutLittleEndian64(out, n);
  for (uint64_t o : offsets) PutLittleEndian64(out, o);
  out.append(channel);
  for (std::string_view p : parts) out.append(p);
  for (const auto& b : buffers) out.append(b);
  return out;
}

std::expected<V1Frame, std::string> DecodeV1(std::string_view frame) {
  constexpr uint64_t kMinOffsets = 6;  // channel, four JSON parts, and the end
  if (frame.size() < 8) {
    return Bad(
        "a v1.kernel.websocket.jupyter.org frame must begin with an offset count "
        "(little-endian uint64); this one has " +
        std::to_string(frame.size()) + " bytes");
  }
  const uint64_t n = LittleEndian64(frame, 0);
  // Checked before any multiplication: 8 * (n + 1) must not wrap.
  if (n < kMinOffsets || n > frame.size() / 8) {
    return Bad("offsets: the offset count is " + std::to_string(n) +
               "; it must be at least 6 (channel, header, parent_header, metadata, content, "
               "end) and the offsets must fit in the frame of " +
               std::to_string(frame.size()) + " bytes");
  }
  const uint64_t table_end = 8 * (n + 1);
  if (table_end > frame.size()) {
    return Bad("offsets: " + std::to_string(n) + " offsets need a table of " +
               std::to_string(table_end) + " bytes; the frame has " + std::to_string(frame.size()));
  }
  std::vector<uint64_t> offsets(n);
  for (uint64_t i = 0; i < n; ++i) offsets[i] = LittleEndian64(frame, 8 * (i + 1));
  if (auto ok = CheckOffsets(offsets, table_end, frame.size()); !ok) {
    return std::unexpected(ok.error());
  }
  auto part = [&](uint64_t i) { return frame.substr(offsets[i], offsets[i + 1] - offsets[i]); };
  V1Frame out;
  out.channel = part(0);
  for (size_t i = 0; i < 4; ++i) out.parts[i] = part(1 + i);
  out.buffers.reserve(n - kMinOffsets);
  for (uint64_t i = 5; i + 1 < n; ++i) out.buffers.push_back(part(i));
  return out;
}

}  // namespace cordon::jupyter
