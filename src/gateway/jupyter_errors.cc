#include "gateway/jupyter_errors.h"

#include <utility>

#include "session/sessions.h"

namespace cordon::gateway {

api::ApiError JupyterError(int status, std::string message, std::string reason) {
  api::ApiError e{status, "", std::move(message), "", nullptr};
  e.style = api::ApiError::Style::kJupyter;
  if (!reason.empty()) e.detail = {{"reason", reason}};
  return e;
}

std::optional<api::ApiError> OverKernelLimit(const session::Sessions& sessions,
                                             size_t max_kernels) {
  const size_t quarantined = sessions.quarantined("python");
  if (sessions.live("python") + quarantined < max_kernels) return std::nullopt;
  std::string message =
      "at most " + std::to_string(max_kernels) + " kernels may run at once (--max-kernels)";
  if (quarantined > 0) message += "; " + std::to_string(quarantined) + " of them quarantined";
  return JupyterError(403, std::move(message), "Resource Limit");
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
