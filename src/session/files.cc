#include "session/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "closure/sha256.h"
#include "session/framing.h"
#include "sys/beneath.h"

namespace cordon::session {
namespace {

using Kind = Error::Kind;

std::pair<std::string, std::string> SplitParent(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

// The workspace's bound (or the host's disk) is reached: a 413 that names
// the limits, never a 500.
Error Full(const std::string& path, int err) {
  return Error{Kind::kTooLarge,
               path + ": the workspace is full (" + sys::ErrnoName(err) +
                   "): it holds as many bytes or files as its bound allows (limits.disk_bytes, "
                   "limits.disk_inodes), or the host's filesystem is full; remove files, or "
                   "create the session with a larger bound",
               "", nullptr};
}

// ext4 lets a process with CAP_SYS_RESOURCE write past a project quota:
// the daemon (root) writes a session's files without it, so an upload
// stops at the workspace's bound where the sandbox's own writes do. Only
// this thread's effective set changes, for the scope.
class WithoutResourceCap final {
 public:
  WithoutResourceCap() {
    if (::syscall(SYS_capget, &header_, data_) != 0) return;
    if (!(data_[0].effective & kBit)) return;
    data_[0].effective &= ~kBit;
    dropped_ = ::syscall(SYS_capset, &header_, data_) == 0;
  }
  ~WithoutResourceCap() {
    if (!dropped_) return;
    data_[0].effective |= kBit;
    (void)::syscall(SYS_capset, &header_, data_);
  }
  WithoutResourceCap(const WithoutResourceCap&) = delete;
  WithoutResourceCap& operator=(const WithoutResourceCap&) = delete;

 private:
  static_assert(CAP_SYS_RESOURCE < 32);
  static constexpr uint32_t kBit = 1u << CAP_SYS_RESOURCE;
  struct __user_cap_header_struct header_ = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data_[2] = {};
  bool dropped_ = false;
};

// A failed resolution or operation, as the API reports it.
Error FromSys(const sys::Error& e, const std::string& path) {
  switch (e.errno_value()) {
    case EXDEV:
    case ELOOP:
      return Error{Kind::kForbidden,
                   path +
                       ": leads outside the workspace (through \"..\", an absolute or "
                       "escaping symbolic link, or a magic link)",
                   "path", nullptr};
    case ENOENT:
      return Error{Kind::kNotFound, path + ": no such file or directory", "path", nullptr};
    case ENOTDIR:
      return Error{Kind::kNotFound, path + ": a component on the way is not a directory", "path",
                   nullptr};
    case EISDIR:
      return Error{Kind::kConflict, path + ": is a directory", "path", nullptr};
    case ENOTEMPTY:
      return Error{Kind::kConflict, path + ": the directory is not empty", "path", nullptr};
    case EEXIST:
      return Error{Kind::kConflict, path + ": already exists and is not a directory", "path",
                   nullptr};
    case ENOSPC:
    case EDQUOT:
      return Full(path, e.errno_value());
  }
  return Error{Kind::kInternal, path + ": " + e.message(), "", nullptr};
}

Outcome<sys::UniqueFd> Open(int workspace_fd, const std::string& path, int flags, mode_t mode = 0) {
  auto fd = sys::OpenBeneath(workspace_fd, path, flags, mode);
  if (!fd) return std::unexpected(FromSys(fd.error(), path));
  return std::move(*fd);
}

// Opens an existing regular file beneath the workspace for reading or
// writing without opening anything else: the path is resolved to an O_PATH
// descriptor first (which opens nothing: no FIFO blocks, no device driver's
// open runs, no socket refuses with ENXIO), its type checked, and only that
// same inode reopened through /proc/self/fd with `flags`. A session that
// swaps the name meanwhile cannot change what is opened.
Outcome<sys::UniqueFd> OpenRegular(int workspace_fd, const std::string& path, int flags) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd pinned, Open(workspace_fd, path, O_PATH));
  struct stat st {};
  if (::fstat(pinned.get(), &st) != 0) {
    return std::unexpected(FromSys(sys::Error::FromErrno("fstat(\"" + path + "\")"), path));
  }
  if (S_ISDIR(st.st_mode)) {
    return Failure(Kind::kConflict, path + ": is a directory (list it with ?dir=)", "path");
  }
  if (!S_ISREG(st.st_mode)) {
    return Failure(Kind::kConflict,
                   path +
                       ": not a regular file (a FIFO, socket, device or other special file is "
                       "never opened through the files API)",
                   "path");
  }
  auto fd = sys::Open("/proc/self/fd/" + std::to_string(pinned.get()), flags | O_CLOEXEC);
  if (!fd) return std::unexpected(FromSys(fd.error(), path));
  return std::move(*fd);
}

// What the files API creates belongs to the workspace's owner: the
// daemon where the workspace is idmapped (the sandbox's root sees it as
// its own), the sandbox's outside uid where the workspace was given
// (chowned) to it on a kernel that cannot idmap it. Otherwise an uploaded
// file would stay the daemon's, which such a sandbox can read but not
// change. `name` beneath `dir_fd` (never followed) was just made.
Outcome<void> GiveToWorkspaceOwner(int workspace_fd, int dir_fd, const std::string& name,
                                   const std::string& path) {
  struct stat owner {};
  if (::fstat(workspace_fd, &owner) != 0) {
    return std::unexpected(FromSys(sys::Error::FromErrno("fstat(the workspace)"), path));
  }
  if (owner.st_uid == ::geteuid() && owner.st_gid == ::getegid()) return {};
  if (::fchownat(dir_fd, name.c_str(), owner.st_uid, owner.st_gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return std::unexpected(
        FromSys(sys::Error::FromErrno("fchownat(\"" + path + "\", the workspace's owner)"), path));
  }
  return {};
}

// mkdir -p of `dir` beneath the workspace, each step resolved beneath it.
Outcome<sys::UniqueFd> MakeParents(int workspace_fd, const std::string& dir) {
  if (dir == ".") return Open(workspace_fd, ".", O_PATH | O_DIRECTORY);
  size_t start = 0;
  while (true) {
    size_t slash = dir.find('/', start);
    std::string so_far = dir.substr(0, slash);
    auto [parent, name] = SplitParent(so_far);
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd parent_fd,
                            Open(workspace_fd, parent, O_PATH | O_DIRECTORY));
    if (::mkdirat(parent_fd.get(), name.c_str(), 0755) == 0) {
      CORDON_RETURN_IF_ERROR(GiveToWorkspaceOwner(workspace_fd, parent_fd.get(), name, so_far));
    } else if (errno != EEXIST) {
      return std::unexpected(FromSys(sys::Error::FromErrno("mkdirat(\"" + so_far + "\")"), so_far));
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return Open(workspace_fd, dir, O_PATH | O_DIRECTORY);
}

Outcome<struct stat> Stat(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return std::unexpected(FromSys(sys::Error::FromErrno("fstat(\"" + path + "\")"), path));
  }
  return st;
}

int64_t MtimeMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// Reads `fd` from 0 to EOF in chunks, hashing it, keeping the bytes in
// `body` when given. At most `max_bytes` are read: a session that grows the
// file while it is read (its size was checked before) gets a 413, and the
// daemon never holds more than the bound.
Outcome<std::string> HashFile(int fd, const std::string& path, std::string* body,
                              uint64_t max_bytes) {
  auto internal = [&](const sys::Error& e) {
    return std::unexpected(Error{Kind::kInternal, path + ": " + e.message(), "", nullptr});
  };
  auto hash = closure::Sha256::Create();
  if (!hash) return internal(hash.error());
  std::string buf(1 << 16, '\0');
  off_t at = 0;
  while (true) {
    ssize_t n = ::pread(fd, buf.data(), buf.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return internal(sys::Error::FromErrno("pread"));
    if (n == 0) break;
    if (static_cast<uint64_t>(at) + static_cast<uint64_t>(n) > max_bytes) {
      return std::unexpected(Error{Kind::kTooLarge,
                                   path + ": grew past the maximum file size of " +
                                       std::to_string(max_bytes) + " bytes while it was read",
                                   "", nullptr});
    }
    std::string_view chunk(buf.data(), static_cast<size_t>(n));
    if (auto u = hash->Update(chunk); !u) return internal(u.error());
    if (body) body->append(chunk);
    at += n;
  }
  auto hex = hash->FinishHex();
  if (!hex) return internal(hex.error());
  return *hex;
}

Outcome<void> WriteAllAt(int fd, std::string_view bytes, off_t at, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      if (err == ENOSPC || err == EDQUOT) return std::unexpected(Full(path, err));
      if (err == EFBIG) {
        return std::unexpected(
            Error{Kind::kTooLarge, path + ": " + sys::Error("write", err).message(), "", nullptr});
      }
      return std::unexpected(FromSys(sys::Error("pwrite", err), path));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
    at += n;
  }
  return {};
}

Error Mismatch(const std::string& path, const std::string& want, const std::string& got,
               bool removed) {
  return Error{Kind::kIntegrity,
               path + ": X-Content-SHA256 does not match: expected " + want + ", the content has " +
                   got + (removed ? "; the file was removed" : "; nothing was written"),
               "X-Content-SHA256",
               {{"expected_sha256", want}, {"actual_sha256", got}}};
}

Outcome<FileInfo> Replace(int workspace_fd, const PutRequest& r, std::string_view body) {
  if (body.size() > r.max_bytes) {
    return Failure(Kind::kTooLarge, r.path + ": " + std::to_string(body.size()) +
                                        " bytes is over the maximum file size of " +
                                        std::to_string(r.max_bytes));
  }
  auto digest = closure::Sha256Hex(body);
  if (!digest) return Failure(Kind::kInternal, digest.error().message());
  if (r.sha256 && *r.sha256 != *digest)
    return std::unexpected(Mismatch(r.path, *r.sha256, *digest, false));
  auto [dir, name] = SplitParent(r.path);
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd parent, MakeParents(workspace_fd, dir));
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd dir_fd, Open(parent.get(), ".", O_RDONLY | O_DIRECTORY));
  const std::string temp = ".cordon-upload-" + NewNonce();
  auto fd = sys::OpenAt(dir_fd.get(), temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
  if (!fd) return std::unexpected(FromSys(fd.error(), r.path));
  auto written = GiveToWorkspaceOwner(workspace_fd, dir_fd.get(), temp, r.path);
  if (written) written = WriteAllAt(fd->get(), body, 0, r.path);
  if (written && ::renameat(dir_fd.get(), temp.c_str(), dir_fd.get(), name.c_str()) != 0) {
    written = std::unexpected(FromSys(sys::Error::FromErrno("renameat"), r.path));
  }
  if (!written) {
    ::unlinkat(dir_fd.get(), temp.c_str(), 0);
    return std::unexpected(written.error());
  }
  CORDON_ASSIGN_OR_RETURN(struct stat st, Stat(fd->get(), r.path));
  return FileInfo{static_cast<uint64_t>(st.st_size), *digest, MtimeMs(st)};
}

Outcome<FileInfo> Append(int workspace_fd, const PutRequest& r, std::string_view body) {
  const uint64_t offset = *r.offset;
  if (offset + body.size() > r.max_bytes) {
    return Failure(Kind::kTooLarge, r.path + ": " + std::to_string(offset + body.size()) +
                                        " bytes would be over the maximum file size of " +
                                        std::to_string(r.max_bytes));
  }
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                          OpenRegular(workspace_fd, r.path, O_RDWR | O_NONBLOCK | O_NOCTTY));
  CORDON_ASSIGN_OR_RETURN(struct stat st, Stat(fd.get(), r.path));
  if (static_cast<uint64_t>(st.st_size) != offset) {
    return Failure(Kind::kConflict,
                   r.path + ": offset " + std::to_string(offset) + " is not the end of the file (" +
                       std::to_string(st.st_size) + " bytes): chunks must be sent in order",
                   "offset");
  }
  if (auto written = WriteAllAt(fd.get(), body, static_cast<off_t>(offset), r.path); !written) {
    // The file is left as it was before this chunk, not with part of it.
    (void)::ftruncate(fd.get(), static_cast<off_t>(offset));
    return std::unexpected(written.error());
  }
  CORDON_ASSIGN_OR_RETURN(std::string digest, HashFile(fd.get(), r.path, nullptr, r.max_bytes));
  if (r.sha256 && *r.sha256 != digest) {
    auto [dir, name] = SplitParent(r.path);
    if (auto parent = Open(workspace_fd, dir, O_PATH | O_DIRECTORY)) {
      ::unlinkat(parent->get(), name.c_str(), 0);
    }
    return std::unexpected(Mismatch(r.path, *r.sha256, digest, true));
  }
  CORDON_ASSIGN_OR_RETURN(st, Stat(fd.get(), r.path));
  return FileInfo{static_cast<uint64_t>(st.st_size), digest, MtimeMs(st)};
}

}  // namespace

std::optional<Error> CheckRelativePath(std::string_view path, const std::string& field) {
  auto bad = [&](const std::string& why) {
    return Error{Kind::kInvalid, "path \"" + std::string(path) + "\" " + why, field, nullptr};
  };
  if (path.empty()) return bad("is empty");
  if (path.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (path.front() == '/') return bad("is absolute: paths are relative to the workspace");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view part = path.substr(start, end - start);
    if (part == "..") return bad("climbs out with \"..\"");
    if (part.empty() || part == ".") return bad("has an empty or \".\" component");
    start = end + 1;
  }
  return std::nullopt;
}

Outcome<FileInfo> PutFile(int workspace_fd, const PutRequest& request, std::string_view body) {
  if (auto bad = CheckRelativePath(request.path, "path")) return std::unexpected(*bad);
  if (request.sha256 && !closure::IsSha256Hex(*request.sha256)) {
    return Failure(Kind::kInvalid, "X-Content-SHA256 must be 64 lowercase hex digits",
                   "X-Content-SHA256");
  }
  WithoutResourceCap bound;
  if (!request.offset || *request.offset == 0) return Replace(workspace_fd, request, body);
  return Append(workspace_fd, request, body);
}

Outcome<FileContent> GetFile(int workspace_fd, const std::string& path, bool body,
                             uint64_t max_bytes) {
  if (auto bad = CheckRelativePath(path, "path")) return std::unexpected(*bad);
  // Only a regular file is opened: a FIFO, socket or device planted in the
  // workspace must neither hang the daemon nor reach a driver.
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                          OpenRegular(workspace_fd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  CORDON_ASSIGN_OR_RETURN(struct stat st, Stat(fd.get(), path));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Failure(Kind::kTooLarge, path + ": " + std::to_string(st.st_size) +
                                        " bytes is over the maximum file size of " +
                                        std::to_string(max_bytes));
  }
  FileContent content;
  CORDON_ASSIGN_OR_RETURN(content.info.sha256,
                          HashFile(fd.get(), path, body ? &content.body : nullptr, max_bytes));
  CORDON_ASSIGN_OR_RETURN(st, Stat(fd.get(), path));
  content.info.size = body ? content.body.size() : static_cast<uint64_t>(st.st_size);
  content.info.mtime_ms = MtimeMs(st);
  return content;
}

Outcome<void> DeleteFile(int workspace_fd, const std::string& path) {
  if (auto bad = CheckRelativePath(path, "path")) return std::unexpected(*bad);
  auto [dir, name] = SplitParent(path);
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd parent, Open(workspace_fd, dir, O_PATH | O_DIRECTORY));
  if (::unlinkat(parent.get(), name.c_str(), 0) == 0) return {};
  if (errno == EISDIR && ::unlinkat(parent.get(), name.c_str(), AT_REMOVEDIR) == 0) return {};
  return std::unexpected(FromSys(sys::Error::FromErrno("unlinkat(\"" + path + "\")"), path));
}

Outcome<nlohmann::json> ListFiles(int workspace_fd, const std::string& dir) {
  std::string path = dir.empty() ? "." : dir;
  if (path != ".") {
    if (auto bad = CheckRelativePath(path, "dir")) return std::unexpected(*bad);
  }
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, Open(workspace_fd, path, O_RDONLY | O_DIRECTORY));
  using DirPtr = std::unique_ptr<DIR, decltype([](DIR* d) { ::closedir(d); })>;
  DirPtr d(::fdopendir(fd.get()));
  if (!d) return std::unexpected(FromSys(sys::Error::FromErrno("fdopendir"), path));
  fd.release();  // owned by `d` now
  std::vector<nlohmann::json> entries;
  while (const struct dirent* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(::dirfd(d.get()), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    const char* type = S_ISREG(st.st_mode)   ? "file"
                       : S_ISDIR(st.st_mode) ? "directory"
                       : S_ISLNK(st.st_mode) ? "symlink"
                                             : "other";
    entries.push_back({{"name", name},
                       {"type", type},
                       {"size", static_cast<uint64_t>(st.st_size)},
                       {"mtime_ms", MtimeMs(st)}});
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a["name"] < b["name"]; });
  return nlohmann::json(entries);
}

}  // namespace cordon::session
