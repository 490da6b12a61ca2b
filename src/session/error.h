// What a session operation can fail with, in terms a front door maps to its
// own statuses (the HTTP API: 400, 403, 404, 409, 413, 422, 429, 500; 422 also for a
// limit above a ceiling).
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>

#include "contain/grant.h"

namespace cordon::session {

struct Error {
  enum class Kind {
    kInvalid,       // a field is wrong: `field` names it
    kForbidden,     // a path leads outside the workspace
    kNotFound,      // no such session or file
    kConflict,      // the session's state does not allow it
    kTooLarge,      // a file over the maximum size
    kIntegrity,     // a digest did not match
    kOverCapacity,  // too many sessions
    kAboveCeiling,  // a limit above the operator's ceiling: `field` names it
    kInternal,      // cordon or the host failed
  };
  Kind kind;
  std::string message;
  std::string field;
  nlohmann::json detail;  // extra fields for the error object (survivors, ...)
};

template <typename T>
using Outcome = std::expected<T, Error>;

inline std::unexpected<Error> Failure(Error::Kind kind, std::string message, std::string field = "",
                                      nlohmann::json detail = nullptr) {
  return std::unexpected(Error{kind, std::move(message), std::move(field), std::move(detail)});
}

// An admission error of contain::Acquire: invalid (the field named),
// refused (the missing capabilities in detail["missing"]) or internal.
Error FromAdmit(const contain::AdmitError& error);

}  // namespace cordon::session
