#include "daemon_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

extern char** environ;

namespace cordon::testing {

DaemonProcess::DaemonProcess(std::vector<std::string> extra_args, std::string state_dir) {
  if (state_dir.empty()) {
    owned_state_.emplace();
    state_dir = owned_state_->path() + "/state";
  }
  state_dir_ = state_dir;
  static int serial = 0;
  log_path_ = "/tmp/cordon-daemon-test-" + std::to_string(::getpid()) + "-" +
              std::to_string(serial++) + ".log";
  ::unlink((state_dir_ + "/serve.json").c_str());  // a killed daemon's
  // The tests ask for isolation none where the sandbox is not what they
  // test; the default floor (standard) is tested on its own
  // (test_daemon_client.py).
  std::vector<std::string> argv = {CORDON_BINARY,     "serve",       "--state-dir",   state_dir_,
                                   "--listen",        "127.0.0.1:0", "--cgroup-root", CgroupRoot(),
                                   "--min-isolation", "none"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  // Nothing of the test's own descriptors: a daemon left behind by a crashed
  // test must not hold ctest's output pipe open.
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return;
  // serve.json appears once the daemon answers; there is no descriptor to
  // wait on for a file another process writes, so it is polled, bounded.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto info = nlohmann::json::parse(Slurp(state_dir_ + "/serve.json"), nullptr, false);
    if (!info.is_discarded() && info.value("pid", 0) == pid_) {
      url_ = info["urls"][0].get<std::string>();
      std::string token = Slurp(info["token_file"].get<std::string>());
      token_ = token.substr(0, token.find('\n'));
      return;
    }
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && !status_) {
    Signal(SIGTERM);
    Wait();
  }
  if (std::string report = SanitizerReport(Log()); !report.empty()) {
    ADD_FAILURE() << "the daemon (pid " << pid_ << ") wrote a sanitizer report:\n" << report;
  }
  ::unlink(log_path_.c_str());
}

std::string DaemonProcess::Log() const { return Slurp(log_path_); }

void DaemonProcess::Signal(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

int DaemonProcess::Wait() {
  if (status_) return *status_;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return *status_;
}

}  // namespace cordon::testing
