#include "closure/beneath.h"

#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace cordon::closure {
namespace {

Failure FromError(const sys::Error& error, const std::string& rel) {
  Rule rule = Rule::kUnreadable;
  switch (error.errno_value()) {
    case ENOENT:
    case ENOTDIR:  // a directory on the way became something else
      rule = Rule::kMissing;
      break;
    case ELOOP:  // O_NOFOLLOW met a symbolic link
      rule = Rule::kSymlink;
      break;
  }
  return Failure{rule, rel, rel + ": " + error.message()};
}

std::expected<struct stat, sys::Error> Fstat(int fd, const std::string& rel) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys::FailErrno("fstat(\"" + rel + "\")");
  return st;
}

using DirPtr = std::unique_ptr<DIR, decltype([](DIR* d) { ::closedir(d); })>;

void WalkDir(sys::UniqueFd fd, const std::string& prefix,
             const std::function<bool(const WalkItem&)>& visit, std::vector<Failure>& problems) {
  const std::string shown = prefix.empty() ? "." : prefix;
  auto unreadable = [&](const sys::Error& error) {
    problems.push_back(Failure{Rule::kUnreadable, shown, shown + ": " + error.message()});
  };
  DirPtr dir(::fdopendir(fd.get()));
  if (!dir) return unreadable(sys::Error::FromErrno("fdopendir(\"" + shown + "\")"));
  fd.release();  // now owned by `dir`
  const int parent = ::dirfd(dir.get());

  std::vector<std::string> names;
  while (true) {
    errno = 0;
    const struct dirent* d = ::readdir(dir.get());
    if (d == nullptr) {
      if (errno != 0) return unreadable(sys::Error::FromErrno("readdir(\"" + shown + "\")"));
      break;
    }
    std::string name = d->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());

  for (const std::string& name : names) {
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    struct stat st;
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since it was listed: it is no longer there
      problems.push_back(
          FromError(sys::Error::FromErrno("fstatat(\"" + path + "\", AT_SYMLINK_NOFOLLOW)"), path));
      continue;
    }
    if (!visit(WalkItem{parent, name, path, st}) || !S_ISDIR(st.st_mode)) continue;
    auto child = sys::OpenAt(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (!child) {
      problems.push_back(FromError(child.error(), path));
      continue;
    }
    WalkDir(std::move(*child), path, visit, problems);
  }
}

}  // namespace

std::string FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unknown type";
}

std::expected<OpenedFile, Failure> OpenRegularAt(int parent_fd, const std::string& name,
                                                 const std::string& rel) {
  // Look before reading: opening a FIFO for reading blocks and opening a
  // device can act on it (a tape rewinds). An O_PATH fd does neither, and
  // fstat on it says what the name is.
  auto probe = sys::OpenAt(parent_fd, name, O_PATH | O_NOFOLLOW);
  if (!probe) return std::unexpected(FromError(probe.error(), rel));
  auto seen = Fstat(probe->get(), rel);
  if (!seen) return std::unexpected(FromError(seen.error(), rel));
  if (S_ISLNK(seen->st_mode)) {
    return std::unexpected(Failure{Rule::kSymlink, rel, rel + " is a symbolic link"});
  }
  if (!S_ISREG(seen->st_mode)) {
    return std::unexpected(
        Failure{Rule::kNotRegular, rel,
                rel + " is " + FileTypeName(seen->st_mode) + ", not a regular file"});
  }
  // O_NONBLOCK: if the name was swapped for a FIFO since the look, this open
  // must not hang; the inode comparison below then catches the swap.
  auto fd = sys::OpenAt(parent_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (!fd) return std::unexpected(FromError(fd.error(), rel));
  auto st = Fstat(fd->get(), rel);
  if (!st) return std::unexpected(FromError(st.error(), rel));
  if (st->st_dev != seen->st_dev || st->st_ino != seen->st_ino) {
    return std::unexpected(
        Failure{Rule::kChangedWhileReading, rel, rel + " was replaced while it was being opened"});
  }
  if (auto blocking = sys::SetNonBlocking(fd->get(), false); !blocking) {
    return std::unexpected(FromError(blocking.error(), rel));
  }
  return OpenedFile{std::move(*fd), *st};
}

std::expected<OpenedFile, Failure> OpenRegularBeneath(int dir_fd, const std::string& rel) {
  sys::UniqueFd held;  // the current directory, once below `dir_fd`
  int current = dir_fd;
  size_t start = 0;
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', start)) {
    const std::string component = rel.substr(start, slash - start);
    const std::string so_far = rel.substr(0, slash);
    // O_PATH without O_DIRECTORY: a symlink then opens as itself and fstat
    // tells it apart from a missing or non-directory component.
    auto next = sys::OpenAt(current, component, O_PATH | O_NOFOLLOW);
    if (!next) return std::unexpected(FromError(next.error(), rel));
    auto st = Fstat(next->get(), so_far);
    if (!st) return std::unexpected(FromError(st.error(), rel));
    if (S_ISLNK(st->st_mode)) {
      return std::unexpected(
          Failure{Rule::kSymlink, rel, rel + ": the directory " + so_far + " is a symbolic link"});
    }
    if (!S_ISDIR(st->st_mode)) {
      return std::unexpected(
          Failure{Rule::kMissing, rel,
                  rel + ": " + so_far + " is " + FileTypeName(st->st_mode) + ", not a directory"});
    }
    held = std::move(*next);
    current = held.get();
    start = slash + 1;
  }
  return OpenRegularAt(current, rel.substr(start), rel);
}

void Walk(int dir_fd, const std::function<bool(const WalkItem&)>& visit,
          std::vector<Failure>& problems) {
  auto root = sys::OpenAt(dir_fd, ".", O_RDONLY | O_DIRECTORY);
  if (!root) {
    problems.push_back(Failure{Rule::kUnreadable, ".", ".: " + root.error().message()});
    return;
  }
  WalkDir(std::move(*root), "", visit, problems);
}

}  // namespace cordon::closure
