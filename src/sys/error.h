// Errors as values. errno is turned into an Error where the system call is
// made (in sys/) and nowhere else; every layer above passes Errors along.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace cordon::sys {

class Error final {
 public:
  // `what` names the call and its arguments: "openat2(\"../x\", RESOLVE_BENEATH)".
  // `err` is the errno value, or 0 when the error is not a system call's.
  explicit Error(std::string what, int err = 0) : what_(std::move(what)), errno_(err) {}

  // Captures the current errno.
  static Error FromErrno(std::string what);

  const std::string& what() const { return what_; }
  int errno_value() const { return errno_; }

  // "openat2(\"../x\", RESOLVE_BENEATH): EXDEV (Invalid cross-device link)".
  std::string message() const;

  // Prefixes context: Error("write(\"memory.max\")").Context("set memory limit").
  Error Context(std::string_view context) const;

 private:
  std::string what_;
  int errno_;
};

template <typename T>
using Result = std::expected<T, Error>;

// The symbolic name of an errno value ("ENOENT"), or "E<number>" if unknown.
std::string ErrnoName(int err);

// Parses "ENOENT" back to its value; 0 if unknown.
int ErrnoFromName(std::string_view name);

inline std::unexpected<Error> Fail(std::string what, int err = 0) {
  return std::unexpected(Error(std::move(what), err));
}
std::unexpected<Error> FailErrno(std::string what);

}  // namespace cordon::sys

// Propagate an error from an expression returning std::expected<void, E>.
#define CORDON_RETURN_IF_ERROR(expr)                        \
  do {                                                      \
    if (auto cordon_r_ = (expr); !cordon_r_) {              \
      return std::unexpected(std::move(cordon_r_).error()); \
    }                                                       \
  } while (0)

#define CORDON_CONCAT_INNER_(a, b) a##b
#define CORDON_CONCAT_(a, b) CORDON_CONCAT_INNER_(a, b)

// `CORDON_ASSIGN_OR_RETURN(auto fd, Open(...));` declares `fd` from the value
// or returns the error.
#define CORDON_ASSIGN_OR_RETURN(lhs, expr) \
  CORDON_ASSIGN_OR_RETURN_IMPL_(CORDON_CONCAT_(cordon_r_, __LINE__), lhs, expr)
#define CORDON_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)       \
  auto tmp = (expr);                                        \
  if (!tmp) return std::unexpected(std::move(tmp).error()); \
  lhs = std::move(*tmp)
