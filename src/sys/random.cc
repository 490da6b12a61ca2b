#include "sys/random.h"

#include <sys/random.h>

#include <cerrno>
#include <vector>

namespace cordon::sys {

std::string RandomHex(size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);  // EINTR: again
  }
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace cordon::sys
