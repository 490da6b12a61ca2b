// Reap: finish the grants a dead supervisor left `active`. For each, its
// tree is torn down through its cgroup (named after the grant, so it can
// only hold that grant's processes) or, without one, through the process
// group of a main process whose identity (start ticks, boot id) still
// matches. A process whose identity does not match is never signalled.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "contain/signaller.h"
#include "contain/teardown.h"
#include "store/store.h"

namespace cordon::contain {

struct ReapReport {
  std::string grant_id;
  // "reaped": torn down and verified dead; "gone": nothing was left
  // (another boot, or the identity no longer matches); "survivors": death
  // could not be verified, the grant stays active.
  std::string action;
  Release release;
  std::string note;  // why, in words
};

struct ReapOptions {
  std::chrono::milliseconds verify_timeout{5000};
  // Reap only this grant (empty: every orphaned active grant).
  std::string grant_id;
};

// Grants whose supervisor is still alive are left alone.
sys::Result<std::vector<ReapReport>> Reap(store::Store& store, Signaller& signaller,
                                          const ReapOptions& options);

}  // namespace cordon::contain
