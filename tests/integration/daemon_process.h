// A real `cordon serve` for the integration tests: started on a free
// loopback port with its own state directory and the tests' cgroup root,
// ready once it has written <state>/serve.json (after recovery).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "http_client.h"
#include "support.h"

namespace cordon::testing {

class DaemonProcess final {
 public:
  // `state_dir`: reuse one (a restart); empty: a fresh temporary one.
  explicit DaemonProcess(std::vector<std::string> extra_args = {}, std::string state_dir = "");
  ~DaemonProcess();  // SIGTERM, then waits for the exit
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  bool ready() const { return !url_.empty(); }
  const std::string& url() const { return url_; }
  const std::string& token() const { return token_; }
  const std::string& state_dir() const { return state_dir_; }
  pid_t pid() const { return pid_; }
  HttpClient Client() const { return HttpClient(url_, token_); }
  std::string Workspace(const std::string& id) const { return state_dir_ + "/workspaces/" + id; }
  std::string Log() const;

  void Signal(int sig);
  int Wait();  // the exit status, or 128+N for signal N

 private:
  std::optional<TempDir> owned_state_;
  std::string state_dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string url_;
  std::string token_;
};

}  // namespace cordon::testing
