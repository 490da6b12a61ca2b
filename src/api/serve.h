// `cordon serve`: the daemon as a process. Runs the loop until SIGTERM (or
// SIGINT), then stops accepting, tears everything down (verified) and
// returns 0, or 1 when some teardown could not be verified.
#pragma once

#include <boost/asio/signal_set.hpp>

#include "api/daemon.h"

namespace cordon::api {

int Serve(DaemonOptions options);

// On a pure cgroup v2 host, moves this process into a leaf of its cgroup
// and sets options.cgroup_root to it (see serve.cc); before Daemon::Start.
void MoveIntoLeaf(DaemonOptions& options);

// Once the daemon has stopped: `signals` (SIGTERM, SIGINT) let go, and
// those signals ignored until the process exits, so that one more (a
// second SIGTERM) does not turn the stop's exit status into a kill.
void IgnoreSignalsFromNowOn(boost::asio::signal_set& signals);

}  // namespace cordon::api
