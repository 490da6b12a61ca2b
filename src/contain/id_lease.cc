#include "contain/id_lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace cordon::contain {

namespace {

bool MakeDir(const std::string& path, mode_t mode) {
  return ::mkdir(path.c_str(), mode) == 0 || errno == EEXIST;
}

}  // namespace

std::string IdLeaseDir(const std::string& state_dir) {
  if (::geteuid() == 0) {
    const std::string dir = kHostIdLeaseDir;
    // Both made here: a /run/cordon that exists but cannot take the
    // directory (a read-only /run with it in the image) falls back as a
    // missing /run does, instead of refusing every grant.
    if (MakeDir(dir.substr(0, dir.rfind('/')), 0711) && MakeDir(dir, 0700)) return dir;
  }
  return state_dir + "/ids";
}

sys::Result<IdLease> IdLease::Acquire(const std::string& dir, IdRange range) {
  if (!MakeDir(dir, 0700)) return sys::FailErrno("mkdir(\"" + dir + "\")");
  // The lowest free id: the lock files never outnumber the sandboxes that
  // ran at the same time.
  for (uint32_t i = 0; i < range.count; ++i) {
    uint32_t id = range.first + i;
    CORDON_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::Open(dir + "/" + std::to_string(id) + ".lock",
                                                        O_RDONLY | O_CREAT, 0600));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return IdLease(id, std::move(fd));
    if (errno != EWOULDBLOCK)
      return sys::FailErrno("flock(" + dir + "/" + std::to_string(id) + ")");
  }
  return sys::Fail("every id of " + std::to_string(range.first) + "+" +
                       std::to_string(range.count) + " is held by a running sandbox",
                   EAGAIN);
}

}  // namespace cordon::contain
