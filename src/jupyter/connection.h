// A kernel's connection: ZeroMQ `ipc` endpoints (unix sockets) in a private
// runtime directory, and a fresh random HMAC-SHA256 key. The kernel reads
// both from the connection file; the key is never shown to API clients.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sys/error.h"

namespace cordon::jupyter {

enum class Channel { kShell, kIopub, kStdin, kControl, kHeartbeat };

std::string_view ChannelName(Channel c);  // "shell", "iopub", ...

struct Connection {
  std::string runtime_dir;  // mode 0700, as the supervisor sees it
  std::string ip;           // the ipc path prefix the supervisor connects to: "<ip>-<port>"
  std::string kernel_ip;    // the same prefix as the kernel sees it (inside its mounts)
  std::string key;          // 64 hex digits
  std::string file;         // the connection file, mode 0600

  std::string Endpoint(Channel c) const;
  nlohmann::json ToJson() const;  // what the kernel reads
};

// Creates `runtime_dir` (0700), a fresh key and the connection file (0600).
// `kernel_dir` is where the kernel will see `runtime_dir` (the same path
// when it shares the supervisor's mounts). Unix socket paths must fit in
// sockaddr_un (107 bytes); a longer directory is refused.
sys::Result<Connection> WriteConnection(const std::string& runtime_dir,
                                        const std::string& kernel_dir);

}  // namespace cordon::jupyter
