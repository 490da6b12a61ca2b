// `cordon serve`: the daemon as a process. Runs the loop until SIGTERM (or
// another signal that would end it: AddStopSignals), then stops accepting,
// tears everything down (verified) and returns 0, or 1 when some teardown
// could not be verified.
#pragma once

#include <boost/asio/signal_set.hpp>

#include "api/daemon.h"

namespace cordon::api {

int Serve(DaemonOptions options);

// On a pure cgroup v2 host, moves this process into a leaf of its cgroup
// and sets options.cgroup_root to it (see serve.cc); before Daemon::Start.
void MoveIntoLeaf(DaemonOptions& options);

// The signals that stop the daemon (tear everything down, verified): SIGTERM,
// SIGINT, and every other one that would end the process and that it can
// catch (SIGHUP, SIGQUIT, SIGUSR1, ...: sys::CatchableEndingSignals), which
// before killed it and left every sandbox running until the next start.
void AddStopSignals(boost::asio::signal_set& signals);

// Once the daemon has stopped: `signals` let go, and those signals ignored
// until the process exits, so that one more (a second SIGTERM) does not
// turn the stop's exit status into a kill.
void IgnoreSignalsFromNowOn(boost::asio::signal_set& signals);

}  // namespace cordon::api
