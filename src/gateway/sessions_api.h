// Jupyter's sessions API (/api/sessions): a path (a notebook's, or any name a
// client keeps unique, as E2B does) bound to a kernel of /api/kernels. What
// JupyterLab's SessionManager, the notebook front end and E2B's code
// interpreter bind kernels with.
//
//   GET    /api/sessions             200 [model...], oldest first
//   POST   /api/sessions             201, Location, model: {"path", "type",
//          "name"?, "kernel"?: {"id"} | {"name"}}; a path that has a session
//          answers that session (201, as jupyter-server); kernel.id binds a
//          kernel that exists, otherwise a new kernel is started
//   GET    /api/sessions/{id}        200 model
//   PATCH  /api/sessions/{id}        200 model: "path", "name", "type" change;
//          kernel {"id"} binds that kernel, kernel {"name"} starts a new one;
//          either way the kernel it replaces is shut down first
//   DELETE /api/sessions/{id}        204; its kernel is shut down
//
// A model is {"id", "path", "name", "type", "kernel": the /api/kernels model}
// (plus the deprecated "notebook": {"path", "name"} for type "notebook").
// Sessions are rows of the store (store::JupyterSessionRecord), so they
// outlive the daemon as kernels do: after a crash a session lists its
// kernel `dead` (the kernel is `lost`). A session whose kernel is gone (shut
// down through /api/kernels, or at a clean daemon stop) is dropped the next
// time it is looked at, as jupyter-server drops one whose kernel was culled.
//
// Differences from jupyter-server, on purpose: "name" is "" (not null) when
// none was given (JupyterLab's validator wants a string); kernel.id naming no
// kernel is a 400 (jupyter-server 1.23 quietly starts another); an unknown
// kernel name is the 404 of POST /api/kernels (jupyter-server: 501); and
// every field is checked (type, length, NUL bytes) before anything changes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/errors.h"
#include "api/http.h"
#include "store/store.h"

namespace cordon::session {
class Sessions;
}

namespace cordon::gateway {

// What the sessions API needs of the kernels API (gateway.cc).
struct KernelHooks {
  // The /api/kernels model of a kernel; none when there is no such kernel
  // (never was, closed, or not a python session); an error when its
  // record could not be read.
  std::function<sys::Result<std::optional<nlohmann::json>>(const std::string& id)> model;
  // A kernel was started or bound: its activity starts now.
  std::function<void(const std::string& id)> touch;
  // A kernel was shut down: the relay forgets it.
  std::function<void(const std::string& id)> forget;
};

class SessionsApi final {
 public:
  // `max_kernels` is the gateway's --max-kernels; sessions are capped at
  // kSessionsPerKernel times it (binding one kernel to many paths must not
  // grow the store without bound).
  SessionsApi(store::Store& store, size_t max_kernels) : store_(store), max_kernels_(max_kernels) {}
  SessionsApi(const SessionsApi&) = delete;
  SessionsApi& operator=(const SessionsApi&) = delete;

  static constexpr size_t kSessionsPerKernel = 16;

  struct Wanted;  // a POST or PATCH body, checked (sessions_api.cc)

  // Before the first request (the gateway's Attach).
  void Attach(session::Sessions& sessions, KernelHooks kernels);

  // Whether decoded-path segments are /api/sessions or beneath it.
  static bool Owns(const std::vector<std::string>& segments);
  // Answers a request Owns() accepted, now or once its kernel started or
  // stopped. Runs on the daemon's loop, as every session operation.
  void Handle(const api::Request& request, const std::vector<std::string>& segments,
              const std::shared_ptr<api::Exchange>& exchange);

 private:
  struct Live {
    store::JupyterSessionRecord record;
    nlohmann::json kernel;  // its /api/kernels model
  };
  sys::Result<std::vector<Live>> List();
  sys::Result<std::optional<Live>> Find(const std::string& id);
  void Create(Wanted wanted, const std::shared_ptr<api::Exchange>& exchange);
  void Update(const std::string& id, Wanted wanted, const std::shared_ptr<api::Exchange>& exchange);
  void Remove(const std::string& id, const std::shared_ptr<api::Exchange>& exchange);
  // Starts a python kernel; `done` gets its id once it is `starting` (its
  // channels queue until it is ready), or the error.
  void StartKernel(std::function<void(std::expected<std::string, api::ApiError>)> done);
  // Shuts a kernel down (if it still exists); `done` once that was decided.
  void StopKernel(const std::string& kernel_id,
                  std::function<void(std::optional<api::ApiError>)> done);
  nlohmann::json Model(const Live& live) const;

  store::Store& store_;
  size_t max_kernels_;
  session::Sessions* sessions_ = nullptr;
  KernelHooks kernels_;
  // Paths whose POST is starting a kernel: a second POST of the same path
  // waits and then answers the first one's session, instead of starting a
  // kernel of its own. Owned here; each waiter runs once.
  std::map<std::string, std::vector<std::function<void()>>> creating_;
};

}  // namespace cordon::gateway
