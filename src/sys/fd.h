// RAII file descriptors and the few file operations every layer needs.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>

#include "sys/error.h"

namespace cordon::sys {

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd final {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct PipeFds {
  UniqueFd read;
  UniqueFd write;
};

// pipe2 with the given flags (O_CLOEXEC is always added).
Result<PipeFds> MakePipe(int flags = 0);

// open/openat with O_CLOEXEC added.
Result<UniqueFd> Open(const std::string& path, int flags, mode_t mode = 0);
Result<UniqueFd> OpenAt(int dir_fd, const std::string& path, int flags, mode_t mode = 0);

// Reads a whole (small, e.g. /proc or cgroup) file. `limit` bounds memory.
Result<std::string> ReadFile(const std::string& path, size_t limit = 1 << 20);
Result<std::string> ReadFileAt(int dir_fd, const std::string& path, size_t limit = 1 << 20);
Result<std::string> ReadAll(int fd, size_t limit = 1 << 20);

// Writes `content` in one write(2), as cgroup and /proc control files expect.
Result<void> WriteFile(const std::string& path, std::string_view content);
Result<void> WriteFileAt(int dir_fd, const std::string& path, std::string_view content);

// Writes all of `content`, retrying on short writes and EINTR.
Result<void> WriteAll(int fd, std::string_view content);

// Sets or clears O_NONBLOCK.
Result<void> SetNonBlocking(int fd, bool on = true);

// A unix socket made and closed: fails where one cannot be made now (EMFILE:
// this process has no descriptor to spare; ENFILE: the system has none).
Result<void> SpareSocket();

}  // namespace cordon::sys
