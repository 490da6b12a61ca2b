#include "jupyter/wire.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <chrono>
#include <memory>
#include <unordered_map>

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

// HMAC-SHA256 contexts keyed once, per key and thread. OpenSSL 3's one-shot
// HMAC() fetches the MAC and the digest and sets the key up on every call:
// that was a tenth of the daemon's CPU per relayed message (every message
// is signed or verified once). A keyed context is re-initialised with the
// same key (EVP_MAC_init with no key) instead. Bounded: past kMaxKeys keys
// (one per kernel) the cache starts again.
class HmacCache {
 public:
  ~HmacCache() {
    for (auto& [key, ctx] : contexts_) EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac_);
  }
  // A context ready for updates with `key`, or null (then the caller signs
  // nothing: the comparison fails closed).
  EVP_MAC_CTX* Begin(std::string_view key) {
    if (mac_ == nullptr) mac_ = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (mac_ == nullptr) return nullptr;
    auto it = contexts_.find(std::string(key));
    if (it != contexts_.end()) {
      return EVP_MAC_init(it->second, nullptr, 0, nullptr) == 1 ? it->second : nullptr;
    }
    if (contexts_.size() >= kMaxKeys) {
      for (auto& [k, ctx] : contexts_) EVP_MAC_CTX_free(ctx);
      contexts_.clear();
    }
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac_);
    if (ctx == nullptr) return nullptr;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    if (EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) !=
        1) {
      EVP_MAC_CTX_free(ctx);
      return nullptr;
    }
    contexts_.emplace(std::string(key), ctx);
    return ctx;
  }

 private:
  static constexpr size_t kMaxKeys = 256;
  EVP_MAC* mac_ = nullptr;
  std::unordered_map<std::string, EVP_MAC_CTX*> contexts_;
};

// Two digits of `v` (0..99) at `out`.
void Digits2(char* out, int v) {
  out[0] = static_cast<char>('0' + v / 10);
  out[1] = static_cast<char>('0' + v % 10);
}

}  // namespace

std::string Message::msg_type() const { return header.value("msg_type", ""); }
std::string Message::msg_id() const { return header.value("msg_id", ""); }
std::string Message::parent_msg_id() const {
  return parent_header.is_object() ? parent_header.value("msg_id", "") : "";
}

std::string Sign(std::string_view key, const std::vector<std::string_view>& parts) {
  if (key.empty()) return "";
  thread_local HmacCache cache;
  EVP_MAC_CTX* ctx = cache.Begin(key);
  if (ctx == nullptr) return "";
  for (std::string_view p : parts) {
    if (EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) != 1) {
      return "";
    }
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t len = 0;
  if (EVP_MAC_final(ctx, mac, &len, sizeof mac) != 1) return "";
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

// By calendar arithmetic and digits by hand: gmtime_r takes glibc's time
// zone lock and snprintf parses its format, on every relayed message (the
// gateway stamps each one as the kernel's last activity).
std::string IsoNow() {
  using namespace std::chrono;
  const auto now = floor<microseconds>(system_clock::now());
  const auto day = floor<days>(now);
  const year_month_day date{day};
  const hh_mm_ss<microseconds> time{now - day};
  int y = static_cast<int>(date.year());
  if (y < 0 || y > 9999) y = 0;  // not in this program's lifetime
  std::string out = "0000-00-00T00:00:00.000000Z";
  Digits2(&out[0], y / 100);
  Digits2(&out[2], y % 100);
  Digits2(&out[5], static_cast<int>(static_cast<unsigned>(date.month())));
  Digits2(&out[8], static_cast<int>(static_cast<unsigned>(date.day())));
  Digits2(&out[11], static_cast<int>(time.hours().count()));
  Digits2(&out[14], static_cast<int>(time.minutes().count()));
  Digits2(&out[17], static_cast<int>(time.seconds().count()));
  int us = static_cast<int>(time.subseconds().count());
  for (int i = 25; i >= 20; --i, us /= 10) out[i] = static_cast<char>('0' + us % 10);
  return out;
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
