#include "gateway/jupyter_errors.h"

#include <utility>

namespace cordon::gateway {

api::ApiError JupyterError(int status, std::string message, std::string reason) {
  api::ApiError e{status, "", std::move(message), "", nullptr};
  e.style = api::ApiError::Style::kJupyter;
  if (!reason.empty()) e.detail = {{"reason", reason}};
  return e;
}

api::ApiError FromSession(const session::Error& error) {
  api::ApiError e = api::FromSession(error);
  e.style = api::ApiError::Style::kJupyter;
  e.detail = nullptr;
  if (error.kind == session::Error::Kind::kOverCapacity) {
    e.status = 403;
    e.detail = {{"reason", "Resource Limit"}};
  }
  if (!error.field.empty() && error.message.find(error.field) != 0) {
    e.message = error.field + ": " + error.message;
  }
  return e;
}

}  // namespace cordon::gateway
