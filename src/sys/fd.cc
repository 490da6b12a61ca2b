#include "sys/fd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace cordon::sys {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // close(2) errors cannot be acted on here.
  fd_ = fd;
}

Result<PipeFds> MakePipe(int flags) {
  int fds[2];
  if (::pipe2(fds, flags | O_CLOEXEC) != 0) return FailErrno("pipe2");
  return PipeFds{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Result<UniqueFd> Open(const std::string& path, int flags, mode_t mode) {
  return OpenAt(AT_FDCWD, path, flags, mode);
}

Result<UniqueFd> OpenAt(int dir_fd, const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::openat(dir_fd, path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return FailErrno("open(\"" + path + "\")");
  return UniqueFd(fd);
}

Result<std::string> ReadAll(int fd, size_t limit) {
  std::string out;
  char buf[8192];
  while (out.size() < limit) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FailErrno("read");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  if (out.size() > limit) out.resize(limit);
  return out;
}

Result<std::string> ReadFile(const std::string& path, size_t limit) {
  return ReadFileAt(AT_FDCWD, path, limit);
}

Result<std::string> ReadFileAt(int dir_fd, const std::string& path, size_t limit) {
  CORDON_ASSIGN_OR_RETURN(UniqueFd fd, OpenAt(dir_fd, path, O_RDONLY));
  auto content = ReadAll(fd.get(), limit);
  if (!content) return std::unexpected(content.error().Context("read(\"" + path + "\")"));
  return content;
}

Result<void> WriteFile(const std::string& path, std::string_view content) {
  return WriteFileAt(AT_FDCWD, path, content);
}

Result<void> WriteFileAt(int dir_fd, const std::string& path, std::string_view content) {
  CORDON_ASSIGN_OR_RETURN(UniqueFd fd, OpenAt(dir_fd, path, O_WRONLY));
  ssize_t n;
  do {
    n = ::write(fd.get(), content.data(), content.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return FailErrno("write(\"" + path + "\", \"" + std::string(content) + "\")");
  if (static_cast<size_t>(n) != content.size()) {
    return Fail("write(\"" + path + "\"): short write", EIO);
  }
  return {};
}

Result<void> WriteAll(int fd, std::string_view content) {
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return FailErrno("write");
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<void> SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return FailErrno("fcntl(F_GETFL)");
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return FailErrno("fcntl(F_SETFL)");
  return {};
}

Result<void> SpareSocket() {
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe) return FailErrno("socket(AF_UNIX)");
  return {};
}

}  // namespace cordon::sys
