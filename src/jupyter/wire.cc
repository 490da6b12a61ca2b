#include "jupyter/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "sys/json_text.h"
#include "sys/random.h"

namespace cordon::jupyter {
namespace {

constexpr std::string_view kDelimiter = "<IDS|MSG>";

std::string Hex(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

std::string Text(const nlohmann::json& j) { return sys::JsonText(j); }

}  // namespace

std::string Message::msg_type() const { return header.value("msg_type", ""); }
std::string Message::msg_id() const { return header.value("msg_id", ""); }
std::string Message::parent_msg_id() const {
  return parent_header.is_object() ? parent_header.value("msg_id", "") : "";
}

std::string Sign(std::string_view key, const std::vector<std::string_view>& parts) {
  if (key.empty()) return "";
  std::string data;
  for (std::string_view p : parts) data.append(p);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return Hex(mac, len);
}

std::vector<std::string> Serialize(const Message& m, std::string_view key) {
  std::vector<std::string> frames = m.identities;
  std::string header = Text(m.header), parent = Text(m.parent_header), metadata = Text(m.metadata),
              content = Text(m.content);
  frames.emplace_back(kDelimiter);
  frames.push_back(Sign(key, {header, parent, metadata, content}));
  frames.push_back(std::move(header));
  frames.push_back(std::move(parent));
  frames.push_back(std::move(metadata));
  frames.push_back(std::move(content));
  for (const auto& b : m.buffers) frames.push_back(b);
  return frames;
}

std::expected<Message, std::string> Parse(const std::vector<std::string>& frames,
                                          std::string_view key) {
  size_t delim = 0;
  while (delim < frames.size() && frames[delim] != kDelimiter) ++delim;
  if (delim == frames.size()) return std::unexpected("no <IDS|MSG> delimiter");
  if (frames.size() < delim + 6)
    return std::unexpected("fewer than the five parts after <IDS|MSG>");
  const std::string& signature = frames[delim + 1];
  std::string expected =
      Sign(key, {frames[delim + 2], frames[delim + 3], frames[delim + 4], frames[delim + 5]});
  // Constant time: how much of a forged signature matched must not show.
  if (signature.size() != expected.size() ||
      CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) != 0) {
    return std::unexpected("bad signature");
  }
  Message m;
  m.identities.assign(frames.begin(), frames.begin() + static_cast<ptrdiff_t>(delim));
  nlohmann::json* parts[] = {&m.header, &m.parent_header, &m.metadata, &m.content};
  for (size_t i = 0; i < 4; ++i) {
    *parts[i] = nlohmann::json::parse(frames[delim + 2 + i], nullptr, false);
    if (parts[i]->is_discarded()) return std::unexpected("a part is not valid JSON");
  }
  if (!m.header.is_object()) return std::unexpected("the header is not an object");
  m.buffers.assign(frames.begin() + static_cast<ptrdiff_t>(delim + 6), frames.end());
  return m;
}

std::string NewUuid() { return sys::RandomUuid(); }

std::string IsoNow() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us % 1'000'000));
  return buf;
}

Message NewMessage(std::string_view session, std::string_view msg_type, nlohmann::json content,
                   const Message* parent) {
  Message m;
  m.header = {{"msg_id", NewUuid()}, {"session", session},   {"username", "cordon"},
              {"date", IsoNow()},    {"msg_type", msg_type}, {"version", "5.3"}};
  if (parent) m.parent_header = parent->header;
  m.content = std::move(content);
  return m;
}

}  // namespace cordon::jupyter
