#include "api/errors.h"

namespace cordon::api {

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
    case Kind::kInternal:
      break;
  }
  return make(500, "internal");
}

}  // namespace cordon::api
