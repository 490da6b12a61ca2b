// Running the cordon binary from tests: its exit status, output files and
// rusage, and a fixture with a private state directory and cgroup root.
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

using nlohmann::json;

struct Ran {
  int status = -1;  // exit status, or 128+N when killed by signal N
  std::string out;
  std::string err;
  struct rusage usage {};
  json Json() const { return json::parse(out); }
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
  Ran Wait() {
    Ran r;
    int status = 0;
    ::wait4(pid_, &status, 0, &r.usage);
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

// Waits (bounded) until what `c` wrote to stdout contains `text`: the
// writer is another process, so the file is polled.
inline bool WaitForOutput(const Cordon& c, const std::string& text) {
  for (int i = 0; i < 2000; ++i) {
    if (Slurp(c.out_path()).find(text) != std::string::npos) return true;
    ::usleep(5000);
  }
  return false;
}

class CliTest : public ::testing::Test {
 protected:
  // `cordon run` with this test's state dir and cgroup root, then `rest`.
  std::vector<std::string> RunArgs(std::vector<std::string> rest) {
    std::vector<std::string> a = {"run", "--state-dir", state_.path(), "--cgroup-root",
                                  CgroupRoot()};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  }
  Ran Run(std::vector<std::string> rest, const std::string& stdin_text = "") {
    return Cordon(RunArgs(std::move(rest)), stdin_text).Wait();
  }
  Ran Admin(std::vector<std::string> args) {
    args.push_back("--state-dir");
    args.push_back(state_.path());
    return Cordon(args).Wait();
  }
  TempDir state_;
  TempDir work_;
};

}  // namespace cordon::testing
