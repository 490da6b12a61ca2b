#include "closure/digest.h"

#include <unistd.h>

#include <cerrno>
#include <memory>

#include "closure/sha256.h"

namespace cordon::closure {
namespace {

constexpr size_t kChunk = size_t{1} << 16;

bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

Failure Unreadable(const std::string& rel, const std::string& why) {
  return Failure{Rule::kUnreadable, rel, rel + ": " + why};
}

}  // namespace

std::expected<FileDigest, Failure> DigestFile(int fd, const struct stat& opened,
                                              const std::string& rel,
                                              const std::function<void()>& before_read) {
  auto sha = Sha256::Create();
  if (!sha) return std::unexpected(Unreadable(rel, sha.error().message()));
  if (before_read) before_read();

  auto buffer = std::make_unique<char[]>(kChunk);
  uint64_t total = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer.get(), kChunk, static_cast<off_t>(total));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(
          Unreadable(rel, sys::Error::FromErrno("pread(\"" + rel + "\")").message()));
    }
    if (n == 0) break;
    if (auto updated = sha->Update(std::string_view(buffer.get(), static_cast<size_t>(n)));
        !updated) {
      return std::unexpected(Unreadable(rel, updated.error().message()));
    }
    total += static_cast<uint64_t>(n);
  }

  struct stat after;
  if (::fstat(fd, &after) != 0) {
    return std::unexpected(
        Unreadable(rel, sys::Error::FromErrno("fstat(\"" + rel + "\")").message()));
  }
  if (after.st_dev != opened.st_dev || after.st_ino != opened.st_ino ||
      after.st_size != opened.st_size || !SameTime(after.st_mtim, opened.st_mtim) ||
      !SameTime(after.st_ctim, opened.st_ctim) || total != static_cast<uint64_t>(opened.st_size)) {
    return std::unexpected(
        Failure{Rule::kChangedWhileReading, rel,
                rel + " changed while it was read (size " + std::to_string(opened.st_size) +
                    " -> " + std::to_string(after.st_size) + ", " + std::to_string(total) +
                    " bytes read, or its mtime/ctime moved): something is writing to it"});
  }
  auto hex = sha->FinishHex();
  if (!hex) return std::unexpected(Unreadable(rel, hex.error().message()));
  return FileDigest{std::move(*hex), total};
}

}  // namespace cordon::closure
