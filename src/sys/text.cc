#include "sys/text.h"

#include <openssl/evp.h>

#include <cstdint>

namespace cordon::sys {

bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t length;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      length = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      length = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      length = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + length > s.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[length] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += length;
  }
  return true;
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  // The alphabet only, and '=' only as the last one or two characters
  // (EVP_DecodeBlock would take "====" for a zero byte, and skip spaces).
  size_t pad = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  for (char c : text.substr(0, text.size() - pad)) {
    bool alphabet = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '/';
    if (!alphabet) return std::nullopt;
  }
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as decoded zero bytes.
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::vector<std::string_view> SplitCommas(std::string_view list) {
  std::vector<std::string_view> fields;
  while (true) {
    size_t comma = list.find(',');
    fields.push_back(list.substr(0, comma));
    if (comma == std::string_view::npos) return fields;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace cordon::sys
