// A fixture for tests of the cordon binary: a private state directory and
// cgroup root, and waiting for what a running cordon writes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cordon_process.h"
#include "support.h"

namespace cordon::testing {

using nlohmann::json;

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
