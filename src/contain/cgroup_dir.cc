#include "contain/cgroup_dir.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace cordon::contain {

std::string_view GroupKillName(GroupKill kill) {
  switch (kill) {
    case GroupKill::kCgroupKill:
      return "cgroup.kill";
    case GroupKill::kFreezeKill:
      return "cgroup.freeze+kill";
    case GroupKill::kEach:
      return "kill_each";
  }
  return "kill_each";
}

sys::Result<CgroupDir> CgroupDir::Create(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) return sys::FailErrno("mkdir(\"" + path + "\")");
  auto dir = Open(path);
  if (!dir) ::rmdir(path.c_str());
  return dir;
}

sys::Result<CgroupDir> CgroupDir::Open(const std::string& path) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(path, O_RDONLY | O_DIRECTORY));
  return CgroupDir(path, std::move(fd));
}

bool CgroupDir::Has(const std::string& file) const {
  return ::faccessat(fd_.get(), file.c_str(), F_OK, 0) == 0;
}

GroupKill CgroupDir::Kill() const {
  if (Has("cgroup.kill")) return GroupKill::kCgroupKill;
  if (Has("cgroup.freeze")) return GroupKill::kFreezeKill;
  return GroupKill::kEach;
}

sys::Result<std::string> CgroupDir::Read(const std::string& file) const {
  auto text = sys::ReadFileAt(fd_.get(), file);
  if (!text) return std::unexpected(text.error().Context(path_));
  return text;
}

sys::Result<void> CgroupDir::Write(const std::string& file, std::string_view value) const {
  auto done = sys::WriteFileAt(fd_.get(), file, value);
  if (!done) return std::unexpected(done.error().Context(path_));
  return {};
}

sys::Result<std::vector<std::optional<uint64_t>>> CgroupDir::ReadKeys(
    const std::string& file, std::initializer_list<std::string_view> keys) const {
  CORDON_ASSIGN_OR_RETURN(std::string text, Read(file));
  std::vector<std::optional<uint64_t>> values(keys.size());
  std::string_view rest(text);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    size_t i = 0;
    for (std::string_view key : keys) {
      if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') {
        std::string_view number = line.substr(key.size() + 1);
        uint64_t value = 0;
        auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
        if (ec != std::errc()) {
          return sys::Fail(path_ + "/" + file + ": bad value for " + std::string(key), EINVAL);
        }
        values[i] = value;
      }
      ++i;
    }
  }
  return values;
}

sys::Result<std::optional<uint64_t>> CgroupDir::ReadKey(const std::string& file,
                                                        std::string_view key) const {
  CORDON_ASSIGN_OR_RETURN(auto values, ReadKeys(file, {key}));
  return values.front();
}

std::vector<pid_t> ParsePids(std::string_view text) {
  std::vector<pid_t> pids;
  const char* p = text.data();
  const char* end = text.data() + text.size();
  while (p < end) {
    pid_t pid = 0;
    auto [next, ec] = std::from_chars(p, end, pid);
    if (ec == std::errc()) pids.push_back(pid);
    p = next;
    while (p < end && (*p < '0' || *p > '9')) ++p;
  }
  return pids;
}

sys::Result<std::vector<pid_t>> CgroupDir::Procs() const {
  CORDON_ASSIGN_OR_RETURN(std::string text, Read("cgroup.procs"));
  return ParsePids(text);
}

sys::Result<sys::UniqueFd> CgroupDir::WatchEvents() const {
  sys::UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd) return sys::FailErrno("inotify_init1");
  std::string file = path_ + "/cgroup.events";
  if (::inotify_add_watch(fd.get(), file.c_str(), IN_MODIFY) < 0) {
    return sys::FailErrno("inotify_add_watch(\"" + file + "\", IN_MODIFY)");
  }
  return fd;
}

sys::Result<void> CgroupDir::Remove() {
  if (::rmdir(path_.c_str()) != 0 && errno != ENOENT) {
    return sys::FailErrno("rmdir(\"" + path_ + "\")");
  }
  return {};
}

sys::Result<void> MakeDirs(const std::string& path) {
  if (path.empty() || path == "/") return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return sys::Fail("\"" + path + "\" is not a directory", ENOTDIR);
  }
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0)
    CORDON_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return sys::FailErrno("mkdir(\"" + path + "\")");
  }
  return {};
}

}  // namespace cordon::contain
