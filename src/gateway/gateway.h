// The Jupyter Kernel Gateway-compatible surface (/api) and python sessions'
// kernels, as an extension of cordon's daemon (api/extension.h). Kernels
// created here are cordon sessions of kind `python` with a UUID id: same
// containment, workspace, records, recovery and metrics; they appear in
// /v1/sessions, and python sessions created through /v1 appear here.
//
//   GET    /api                          {"version"}
//   GET    /api/kernelspecs              {"default", "kernelspecs": {...}}
//   GET    /api/kernelspecs/python3
//   GET    /api/kernels                  [model...]
//   POST   /api/kernels {"name"?, "env"?} 201, Location, model
//   GET    /api/kernels/{id}             model
//   DELETE /api/kernels/{id}             204
//   POST   /api/kernels/{id}/interrupt   204
//   POST   /api/kernels/{id}/restart     200, model
//   GET    /api/kernels/{id}/channels    WebSocket (channels.h)
//   GET    /api/sessions                 [session...]
//   POST   /api/sessions {"path", "type", "name"?, "kernel"?}  201, Location
//   GET    /api/sessions/{id}            session
//   PATCH  /api/sessions/{id}            session (rename, or another kernel)
//   DELETE /api/sessions/{id}            204, its kernel shut down
//
// Sessions (sessions_api.h) bind paths to these kernels and are kept in the
// store: {"id", "path", "name", "type", "kernel": model}.
//
// A model is {"id", "name", "last_activity", "execution_state",
// "connections"}; errors are {"reason", "message"} with the Kernel
// Gateway's statuses.
#pragma once

#include "api/daemon.h"
#include "api/extension.h"

namespace cordon::gateway {

api::ExtensionMaker Maker(api::GatewayOptions options);

}  // namespace cordon::gateway
