#include "sys/error.h"

#include <cerrno>
#include <cstring>

namespace cordon::sys {

Error Error::FromErrno(std::string what) { return Error(std::move(what), errno); }

std::string Error::message() const {
  if (errno_ == 0) return what_;
  return what_ + ": " + ErrnoName(errno_) + " (" + std::strerror(errno_) + ")";
}

Error Error::Context(std::string_view context) const {
  return Error(std::string(context) + ": " + what_, errno_);
}

std::string ErrnoName(int err) {
  if (const char* name = strerrorname_np(err)) return name;
  return "E" + std::to_string(err);
}

int ErrnoFromName(std::string_view name) {
  // errno values are small; a linear scan is cheaper than a table to keep.
  for (int e = 1; e < 4096; ++e) {
    const char* n = strerrorname_np(e);
    if (n != nullptr && name == n) return e;
  }
  return 0;
}

std::unexpected<Error> FailErrno(std::string what) {
  return std::unexpected(Error::FromErrno(std::move(what)));
}

}  // namespace cordon::sys
