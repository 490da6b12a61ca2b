// Running the cordon binary as users do, for the integration tests: its
// exit status, stdout and stderr (to files), and its resource usage.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support.h"

extern char** environ;

namespace cordon::testing {

struct Ran {
  int status = -1;  // exit status, or 128+N when killed by signal N
  std::string out;
  std::string err;
  struct rusage usage {};
  nlohmann::json Json() const { return nlohmann::json::parse(out); }
};

class Cordon {
 public:
  // Starts cordon with `args`; stdout and stderr go to files.
  Cordon(std::vector<std::string> args, const std::string& stdin_text = "",
         std::vector<std::string> prefix = {})
      : out_(dir_ / "out"), err_(dir_ / "err") {
    std::string in_path = dir_ / "in";
    {
      int fd = ::open(in_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      (void)!::write(fd, stdin_text.data(), stdin_text.size());
      ::close(fd);
    }
    std::vector<std::string> argv = prefix;
    argv.push_back(CORDON_BINARY);
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    ::chmod(dir_.path().c_str(), 0777);  // an unprivileged cordon writes here too
    int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0);
  }
  pid_t pid() const { return pid_; }
  const std::string& out_path() const { return out_; }
  // A cordon the test did not wait for (it failed an assertion early) is
  // asked to stop, tearing down what it runs, and reaped: nothing outlives
  // the test.
  ~Cordon() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  Cordon(const Cordon&) = delete;
  Cordon& operator=(const Cordon&) = delete;

  Ran Wait() {
    Ran r;
    int status = 0;
    ::wait4(pid_, &status, 0, &r.usage);
    pid_ = -1;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = Slurp(out_);
    r.err = Slurp(err_);
    return r;
  }

 private:
  TempDir dir_;
  std::string out_, err_;
  pid_t pid_ = -1;
};

}  // namespace cordon::testing
