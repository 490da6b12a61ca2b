#include "api/serve.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <csignal>

#include "api/log.h"
#include "contain/cgroup_leaf.h"
#include "sys/signalfd.h"

namespace cordon::api {
namespace {

// Descriptors the daemon holds besides its connections: the store, the
// pipes, pidfds and cgroup directories of runs and sessions, kernels'
// ZeroMQ sockets. Generous: it only sets how far the soft limit is raised.
constexpr rlim_t kOwnDescriptors = 4096;

// Every open connection is a descriptor: a soft RLIMIT_NOFILE of 1024 (the
// usual default) would run out before --max-connections did, and accepting
// would fail instead of answering 503. The soft limit is raised as far as
// the connections need (not to the hard limit: runs and sessions inherit
// it, and some programs walk every descriptor up to it); a hard limit too
// low for them is said at start.
void RaiseOpenFilesLimit(const HttpLimits& http) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t needed =
      static_cast<rlim_t>(http.max_connections + http.reserve_connections) + kOwnDescriptors;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    const rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : std::min(needed, rl.rlim_max);
    if (rl.rlim_cur > was && ::setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = was;
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    Log("warning", "open_files_limit",
        {{"limit", rl.rlim_cur},
         {"needed", needed},
         {"max_connections", http.max_connections},
         {"message",
          "the open files limit (RLIMIT_NOFILE, hard limit " + std::to_string(rl.rlim_max) +
              ") is below what --max-connections needs: accepting may fail before the cap is "
              "reached; raise the hard limit (ulimit -Hn) or lower --max-connections"}});
  }
}

}  // namespace

// On a pure cgroup v2 host the daemon moves itself into a leaf of the group
// it was started in (a systemd service's delegated group, a container's
// cgroup namespace root), so that the sandboxes' groups beside it can have
// controllers (DESIGN.md §5; contain/cgroup_leaf.h). Before anything plans
// cgroups: the probe in Daemon::Start then plans from the new cgroup root.
// An operator's --cgroup-root is left as it is.
void MoveIntoLeaf(DaemonOptions& options) {
  if (options.cgroup_root) return;
  auto layout = contain::DiscoverCgroupLayout();
  if (!layout) return;  // the probe reports an unreadable layout itself
  contain::LeafMove leaf = contain::MoveIntoLeaf(*layout, ::getpid());
  if (leaf.moved) {
    Log("info", "cgroup_leaf",
        {{"leaf", leaf.leaf}, {"cgroup_root", *leaf.cgroup_root}, {"message", leaf.note}});
    options.cgroup_root = leaf.cgroup_root;
  } else if (leaf.needed) {
    Log("warning", "cgroup_leaf", {{"message", leaf.note}});
  }
}

int Serve(DaemonOptions options) {
  MoveIntoLeaf(options);
  RaiseOpenFilesLimit(options.http);
  boost::asio::io_context io(1);
  // Blocked signals are not handled until the loop runs; Asio's handler
  // turns them into a loop event.
  boost::asio::signal_set signals(io);
  AddStopSignals(signals);
  const std::string state_dir = options.state_dir;
  auto daemon = Daemon::Start(io, std::move(options));
  if (!daemon) {
    Log("error", "start_failed", {{"error", daemon.error().message()}, {"state_dir", state_dir}});
    return 1;
  }
  Log("info", "listening",
      {{"urls", (*daemon)->urls()},
       {"token_file", (*daemon)->token_path()},
       {"state_dir", state_dir}});
  int status = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    Log("info", "stopping", {{"signal", sig}});
    (*daemon)->Shutdown([&](bool all_dead) {
      status = all_dead ? 0 : 1;
      Log(all_dead ? "info" : "error", "stopped", {{"all_dead", all_dead}});
      io.stop();
    });
  });
  io.run();
  daemon->reset();
  IgnoreSignalsFromNowOn(signals);
  return status;
}

void AddStopSignals(boost::asio::signal_set& signals) {
  for (int sig : sys::CatchableEndingSignals()) signals.add(sig);
}

void IgnoreSignalsFromNowOn(boost::asio::signal_set& signals) {
  // Letting go restores the default action (a kill) until they are
  // ignored: meanwhile this thread, the only one that takes them (cordon's
  // other threads are QuietThreads, libzmq's block every signal too),
  // holds them, and the SIG_IGN discards one that came.
  const std::vector<int> stopping = sys::CatchableEndingSignals();
  sigset_t all, saved;
  ::sigemptyset(&all);
  for (int sig : stopping) ::sigaddset(&all, sig);
  ::pthread_sigmask(SIG_BLOCK, &all, &saved);
  boost::system::error_code ignored;
  signals.clear(ignored);
  for (int sig : stopping) ::signal(sig, SIG_IGN);
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

}  // namespace cordon::api
