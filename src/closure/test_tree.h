// For closure tests only: a directory tree built on disk under /tmp and
// removed when the test ends, and a printer for entries.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

#include "closure/manifest.h"
#include "support.h"

namespace cordon::closure {

class TestTree final {
 public:
  const std::string& root() const { return dir_.path(); }
  std::string operator/(const std::string& rel) const { return dir_ / rel; }

  // Writes `rel` (creating its directories) with exactly `mode`, umask aside.
  void Write(const std::string& rel, const std::string& content, mode_t mode = 0444) const {
    const std::string path = *this / rel;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::filesystem::remove(path);
    std::ofstream(path, std::ios::binary) << content;
    ::chmod(path.c_str(), mode);
  }
  void Mkdir(const std::string& rel) const { std::filesystem::create_directories(*this / rel); }

 private:
  testing::TempDir dir_;  // removed, with everything in it, when the test ends
};

// Readable test failures for entries (found by gtest through ADL).
inline void PrintTo(const Entry& e, std::ostream* os) {
  *os << "{" << e.path << ", " << e.sha256 << ", " << e.size << ", "
      << (e.executable ? "executable" : "not executable") << "}";
}

}  // namespace cordon::closure
