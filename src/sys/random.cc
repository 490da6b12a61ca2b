#include "sys/random.h"

#include <sys/random.h>

#include <cerrno>
#include <vector>

namespace cordon::sys {

namespace {

void RandomBytes(unsigned char* out, size_t bytes) {
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(out + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);  // EINTR: again
  }
}

std::string Hex(const unsigned char* raw, size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (size_t i = 0; i < bytes; ++i) {
    out.push_back(kHex[raw[i] >> 4]);
    out.push_back(kHex[raw[i] & 15]);
  }
  return out;
}

}  // namespace

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  RandomBytes(raw.data(), bytes);
  return Hex(raw.data(), bytes);
}

std::string RandomUuid() {
  unsigned char b[16];
  RandomBytes(b, sizeof b);
  b[6] = (b[6] & 0x0f) | 0x40;  // version 4
  b[8] = (b[8] & 0x3f) | 0x80;  // the RFC 4122 variant
  std::string hex = Hex(b, sizeof b);
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

}  // namespace cordon::sys
