#include "api/serve.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "api/log.h"

namespace cordon::api {

int Serve(DaemonOptions options) {
  boost::asio::io_context io(1);
  // Blocked signals are not handled until the loop runs; Asio's handler
  // turns them into a loop event.
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
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
  return status;
}

}  // namespace cordon::api
