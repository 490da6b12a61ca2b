// A whole run on a small epoll loop of its own: admit, launch, pump,
// teardown, release. What the CLI and tests call; the daemon instead runs
// Execution on its own loop.
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <string_view>

#include "contain/grant.h"
#include "contain/probe.h"
#include "contain/signaller.h"
#include "contain/spec.h"
#include "run/execution.h"
#include "run/result.h"
#include "store/store.h"

namespace cordon::run {

struct SyncOptions {
  ExecutionOptions execution;
  contain::Signaller* signaller = nullptr;  // null: the kernel's
  // A signal that would end the supervisor (SIGINT, the CLI's Ctrl-C,
  // SIGTERM, SIGHUP, SIGUSR1, ...: sys::CatchableEndingSignals) cancels the
  // run instead: they are blocked while it runs and read from a signalfd.
  bool cancel_on_signals = false;
  // The command's output goes on to cordon's own stdout and stderr as it
  // is captured (instead of execution.on_output), without ever blocking the
  // loop: a reader that stops reading holds up neither the deadline nor a
  // signal. What cannot be written at once waits (captured bytes only: at
  // most the output limit per stream) and the rest is written once the run
  // is over. A reader that goes away closes the command's stream, so its
  // next write there fails as it would with nothing between them.
  bool pass_through = false;
};

struct SyncResult {
  RunResult result;
  int cancel_signal = 0;  // the signal that cancelled the run, if any
};

std::expected<SyncResult, contain::AdmitError> RunSync(const contain::Spec& spec,
                                                       const contain::Probe& probe,
                                                       store::Store& store,
                                                       const SyncOptions& options);

}  // namespace cordon::run
