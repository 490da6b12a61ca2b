// cordon serve: the HTTP API over the library, on one Asio loop. Runs are
// run::Execution on an AsioReactor (no thread per run); sessions are
// session::Sessions on the same reactor; files go through session/files.
// Every rule lives in the library: this is the front door that parses,
// authenticates, maps errors to statuses and writes JSON.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/extension.h"
#include "api/http.h"
#include "contain/bounds.h"
#include "contain/signaller.h"
#include "session/sessions.h"

namespace cordon::mcp {
class Server;
}

namespace cordon::api {

// Options of python sessions and the /api surface; read by the extension.
struct GatewayOptions {
  size_t prespawn = 0;  // warm kernels kept ready
  std::chrono::milliseconds interrupt_grace{10000};
  // A new kernel must answer kernel_info within this, or it is torn down.
  std::chrono::milliseconds kernel_ready_timeout{60000};
  std::vector<std::string> env_allowlist;  // names beyond KERNEL_* that POST /api/kernels passes
  size_t max_kernels = 64;                 // live python sessions; past it 403
  uint64_t max_message_bytes = uint64_t{64} << 20;  // a websocket message, either way
};

struct DaemonOptions {
  std::string state_dir;
  // "127.0.0.1:7419", "[::1]:7419" or "unix:/path"; port 0 picks a free one.
  std::vector<std::string> listen = {"127.0.0.1:7419"};
  bool allow_remote = false;              // listening on a non-loopback address
  bool reserve_disk = false;              // contain::DiskSupport::reserve_images
  std::optional<std::string> token_file;  // none: <state>/token, generated if missing
  std::optional<std::string> cgroup_root;
  HttpLimits http;
  uint64_t max_file_bytes = uint64_t{256} << 20;
  size_t max_runs = 32;
  // Sandboxes kept waiting for a run's command (the warm pool, RunsOptions).
  size_t prespawn_runs = 0;
  session::SessionOptions sessions;  // state_dir is filled in
  std::chrono::milliseconds verify_timeout{5000};
  // The limits every run and session gets unless its request sets them,
  // and the ceilings a request may not go above.
  contain::Bounds bounds;
  // The Kernel Gateway surface and python sessions (cordon-serve sets it).
  ExtensionMaker extension;
  GatewayOptions gateway;  // what the extension reads
  // MCP (src/mcp, at /mcp and in `cordon mcp`): the most bytes of each
  // output stream in a tool result (--mcp-output-limit).
  uint64_t mcp_output_limit = uint64_t{64} << 10;
  // An MCP session at /mcp idle this long is ended (--mcp-session-ttl).
  std::chrono::milliseconds mcp_session_ttl{60 * 60 * 1000};
  // The most MCP sessions at /mcp at once (--mcp-max-sessions).
  size_t mcp_max_sessions = 1024;
  // Records of what ended longer ago than this are forgotten
  // (--keep-records): released grants, closed and invalidated sessions.
  std::chrono::milliseconds keep_records{std::chrono::hours(7 * 24)};
  // Injected by tests only (a signaller that cannot kill, to reach the
  // quarantine); null: the kernel's. The cordon binary never sets it.
  contain::Signaller* signaller = nullptr;
};

class Daemon final {
 public:
  // Opens the store, probes the host, tears down (verified, identity-checked)
  // every tree an earlier daemon left, marks its live sessions lost, loads
  // or creates the token, and only then listens: once this returns, the
  // health check answers.
  static sys::Result<std::unique_ptr<Daemon>> Start(boost::asio::io_context& io,
                                                    DaemonOptions options);
  ~Daemon();

  const std::vector<std::string>& urls() const;
  const std::string& token_path() const;
  // The MCP tools over this daemon's runs, sessions and files (what /mcp
  // serves; `cordon mcp`, which listens nowhere, serves it on stdio).
  mcp::Server& mcp();

  // Stops accepting, cancels every run and tears every session down.
  // `done(all_dead)` once every teardown was decided.
  void Shutdown(std::function<void(bool)> done);

  struct Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Reads a token file (the token is its first line, without surrounding
// white space), or creates one with 32 random bytes in hex, mode 0600.
sys::Result<std::string> LoadOrCreateToken(const std::string& path, bool create);

// "host:port" to its parts; "unix:/path" is left to the caller.
struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};
sys::Result<ListenAddress> ParseListen(const std::string& text);

}  // namespace cordon::api
