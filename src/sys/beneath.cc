#include "sys/beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace cordon::sys {

Result<UniqueFd> OpenBeneath(int dir_fd, const std::string& path, int flags, mode_t mode) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  // The kernel rejects a mode without O_CREAT or O_TMPFILE.
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd;
  do {
    fd = ::syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof how);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return FailErrno("openat2(\"" + path + "\", RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)");
  return UniqueFd(static_cast<int>(fd));
}

}  // namespace cordon::sys
