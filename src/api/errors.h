// The API's errors: {"error": {"code", "message", "field"?, ...}} with the
// status that says whose fault it is. 500 is only for cordon's own faults.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "session/error.h"

namespace cordon::api {

struct ApiError {
  int status;
  std::string code;  // "invalid", "unauthorized", "not_found", "conflict", ...
  std::string message;
  std::string field;      // the request field at fault, if one is
  nlohmann::json detail;  // merged into the error object (survivors, missing, ...)
  // kJupyter: the Kernel Gateway's shape, {"reason", "message"} (the /api
  // surface); kCordon: {"error": {...}}.
  enum class Style { kCordon, kJupyter } style = Style::kCordon;
};

nlohmann::json ToJson(const ApiError& error);

ApiError Invalid(std::string field, std::string message);
ApiError FromSession(const session::Error& error);

}  // namespace cordon::api
