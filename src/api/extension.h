// Routes beyond cordon's own /v1 (the Kernel Gateway-compatible /api
// surface, src/gateway): what needs libzmq is built only into the
// dynamically linked cordon-serve, which hands the daemon an Extension.
// The daemon still authenticates every request before an extension sees it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "api/http.h"
#include "api/metrics.h"
#include "contain/probe.h"
#include "contain/signaller.h"
#include "session/runtime.h"
#include "store/store.h"
#include "sys/reactor.h"

namespace cordon::session {
class Sessions;
}

namespace cordon::api {

class Extension {
 public:
  virtual ~Extension() = default;
  // Once the daemon's Sessions exist (before anything is served).
  virtual void Attach(session::Sessions& sessions) = 0;
  // True when the request was one of the extension's (it answers it).
  virtual bool Handle(const Request& request, const std::shared_ptr<Exchange>& exchange) = 0;
  // Whether a path is the extension's: its errors are then written in its
  // own shape (ApiError::style).
  virtual bool Owns(const std::string& path) const = 0;
  // Before the sessions are torn down at shutdown.
  virtual void Stop() {}
};

// What the daemon hands an extension maker, and what the maker gives back.
struct ExtensionServices {
  sys::Reactor& reactor;
  store::Store& store;
  contain::Signaller& signaller;
  const contain::Probe& probe;
  Metrics& metrics;
  std::string state_dir;
  std::chrono::milliseconds verify_timeout;
  // Out: the factory of `python` sessions' runtimes.
  session::RuntimeFactory python;
};

using ExtensionMaker =
    std::function<sys::Result<std::unique_ptr<Extension>>(ExtensionServices& services)>;

}  // namespace cordon::api
