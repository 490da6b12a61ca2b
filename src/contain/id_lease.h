// The outside uid and gid of one sandbox, when a root supervisor maps each
// sandbox to its own unprivileged id (so two sandboxes never share one, and
// none is `nobody`). An id is taken by flock(2) on `<dir>/<id>.lock`; the
// lock lives in the open file, which the sandbox's init inherits and holds
// for as long as any process of the sandbox can run. A supervisor that
// crashes therefore frees nothing early, and nothing leaks: when the last
// holder dies the kernel drops the lock. No table to clean up.
#pragma once

#include <cstdint>
#include <string>

#include "contain/spec.h"
#include "sys/fd.h"

namespace cordon::contain {

// Where ids are leased. Every root supervisor maps its sandboxes into the
// same outside ids, whatever its state directory, so root leases in one
// directory for the whole host (kHostIdLeaseDir): two daemons with a state
// directory each never hand one id to two sandboxes. Where that directory
// cannot be made (no writable /run), and for anyone but root (whose
// sandboxes keep the caller's own id unless it maps a range of its own),
// `<state_dir>/ids`.
inline constexpr const char* kHostIdLeaseDir = "/run/cordon/ids";
std::string IdLeaseDir(const std::string& state_dir);

class IdLease final {
 public:
  // Takes the lowest free id of `range`. Fails with EAGAIN when every id of
  // the range is held.
  static sys::Result<IdLease> Acquire(const std::string& dir, IdRange range);

  IdLease(IdLease&&) noexcept = default;
  IdLease& operator=(IdLease&&) noexcept = default;

  uint32_t id() const { return id_; }
  // The locked file: keep it open in whatever must hold the id.
  int lock_fd() const { return lock_.get(); }

 private:
  IdLease(uint32_t id, sys::UniqueFd lock) : id_(id), lock_(std::move(lock)) {}
  uint32_t id_;
  sys::UniqueFd lock_;
};

}  // namespace cordon::contain
