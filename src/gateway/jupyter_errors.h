// What the /api surface's routes share (gateway.cc, sessions_api.cc): the
// one kernelspec, and errors in the Kernel Gateway's style.
#pragma once

#include <optional>
#include <string>

#include "api/errors.h"
#include "session/error.h"

namespace cordon::session {
class Sessions;
}

namespace cordon::gateway {

// The one kernelspec served: Debian's ipykernel, contained.
inline constexpr const char* kSpecName = "python3";

// {"reason", "message"} with `status`; `reason` only when given.
api::ApiError JupyterError(int status, std::string message, std::string reason = "");

// 403 "Resource Limit" when `max_kernels` python sessions are live or
// quarantined (whose processes are still there); none when another may
// start.
std::optional<api::ApiError> OverKernelLimit(const session::Sessions& sessions, size_t max_kernels);

// A session error as the Kernel Gateway answers it: its statuses (403
// "Resource Limit" when over capacity), the field first in the message.
api::ApiError FromSession(const session::Error& error);

}  // namespace cordon::gateway
