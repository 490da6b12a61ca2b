#include "jupyter/connection.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sys/fd.h"
#include "sys/json_text.h"

namespace cordon::jupyter {
namespace {

// Fixed "ports": with ipc they only name the sockets.
int Port(Channel c) { return static_cast<int>(c) + 1; }

}  // namespace

std::string_view ChannelName(Channel c) {
  switch (c) {
    case Channel::kShell:
      return "shell";
    case Channel::kIopub:
      return "iopub";
    case Channel::kStdin:
      return "stdin";
    case Channel::kControl:
      return "control";
    case Channel::kHeartbeat:
      return "hb";
  }
  return "unknown";
}

std::string Connection::Endpoint(Channel c) const {
  return "ipc://" + ip + "-" + std::to_string(Port(c));
}

nlohmann::json Connection::ToJson() const {
  return {{"transport", "ipc"},
          {"ip", kernel_ip},
          {"shell_port", Port(Channel::kShell)},
          {"iopub_port", Port(Channel::kIopub)},
          {"stdin_port", Port(Channel::kStdin)},
          {"control_port", Port(Channel::kControl)},
          {"hb_port", Port(Channel::kHeartbeat)},
          {"key", key},
          {"signature_scheme", "hmac-sha256"},
          {"kernel_name", "python3"}};
}

sys::Result<Connection> WriteConnection(const std::string& runtime_dir,
                                        const std::string& kernel_dir) {
  Connection c;
  c.runtime_dir = runtime_dir;
  c.ip = runtime_dir + "/k";
  c.kernel_ip = kernel_dir + "/k";
  for (const std::string* prefix : {&c.ip, &c.kernel_ip}) {
    if (prefix->size() + 3 > sizeof(sockaddr_un{}.sun_path) - 1) {
      return sys::Fail("\"" + *prefix + "\" is too long for a unix socket path (108 bytes)",
                       ENAMETOOLONG);
    }
  }
  if (::mkdir(runtime_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return sys::FailErrno("mkdir(\"" + runtime_dir + "\")");
  }
  if (::chmod(runtime_dir.c_str(), 0700) != 0)
    return sys::FailErrno("chmod(\"" + runtime_dir + "\")");
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno != EINTR) return sys::FailErrno("getrandom");
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  for (unsigned char b : raw) {
    c.key.push_back(digits[b >> 4]);
    c.key.push_back(digits[b & 15]);
  }
  c.file = runtime_dir + "/connection.json";
  ::unlink(c.file.c_str());
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(c.file, O_WRONLY | O_CREAT | O_EXCL, 0600));
  CORDON_RETURN_IF_ERROR(sys::WriteAll(fd.get(), sys::JsonText(c.ToJson())));
  return c;
}

}  // namespace cordon::jupyter
