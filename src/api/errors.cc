#include "api/errors.h"

namespace cordon::api {
namespace {

// Whether an internal failure's message says that a filesystem the daemon
// writes to is full (the store's SQLITE_FULL maps to ENOSPC, store/sqlite.cc;
// the others carry the errno name or its text).
bool StorageFull(const std::string& message) {
  for (const char* sign : {"ENOSPC", "EDQUOT", "No space left on device", "Disk quota exceeded",
                           "database or disk is full"}) {
    if (message.find(sign) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

nlohmann::json ToJson(const ApiError& e) {
  if (e.style == ApiError::Style::kJupyter) {
    std::string reason = e.status == 400   ? "Bad Request"
                         : e.status == 401 ? "Unauthorized"
                         : e.status == 403 ? "Forbidden"
                         : e.status == 404 ? "Not Found"
                         : e.status == 405 ? "Method Not Allowed"
                         : e.status == 409 ? "Conflict"
                         : e.status == 413 ? "Payload Too Large"
                         : e.status == 503 ? "Service Unavailable"
                         : e.status == 507 ? "Insufficient Storage"
                         : e.status >= 500 ? "Internal Server Error"
                                           : e.code;
    if (e.detail.is_object() && e.detail.contains("reason")) reason = e.detail["reason"];
    return {{"reason", reason}, {"message", e.message}};
  }
  nlohmann::json error = {{"code", e.code}, {"message", e.message}};
  if (!e.field.empty()) error["field"] = e.field;
  if (e.detail.is_object()) {
    for (const auto& [key, value] : e.detail.items()) {
      if (!error.contains(key)) error[key] = value;
    }
  }
  return {{"error", error}};
}

ApiError Invalid(std::string field, std::string message) {
  return ApiError{400, "invalid", std::move(message), std::move(field), nullptr};
}

ApiError FromSession(const session::Error& e) {
  using Kind = session::Error::Kind;
  auto make = [&](int status, const char* code) {
    return ApiError{status, code, e.message, e.field, e.detail};
  };
  switch (e.kind) {
    case Kind::kInvalid:
      return make(400,
                  e.detail.is_object() && e.detail.contains("missing") ? "refused" : "invalid");
    case Kind::kForbidden:
      return make(403, "forbidden");
    case Kind::kNotFound:
      return make(404, "not_found");
    case Kind::kConflict:
      return make(
          409, e.detail.is_object() && e.detail.contains("survivors") ? "quarantined" : "conflict");
    case Kind::kTooLarge:
      return make(413, "too_large");
    case Kind::kIntegrity:
      return make(422, "integrity");
    case Kind::kOverCapacity:
      return make(429, "over_capacity");
    case Kind::kAboveCeiling:
      return make(422, "above_ceiling");
    case Kind::kInternal:
      break;
  }
  if (StorageFull(e.message)) {
    // Not cordon's fault, and not the client's: the operator frees space.
    return ApiError{507, "insufficient_storage",
                    "the state directory's filesystem is full (ENOSPC): free space there, or "
                    "give the daemon a larger one; " +
                        e.message,
                    e.field, e.detail};
  }
  return make(500, "internal");
}

}  // namespace cordon::api
