#include "session/kernel_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "sys/random.h"

namespace cordon::session {
namespace {

sys::Result<void> Refused(const std::string& root, const sys::Error& cause) {
  return sys::Fail("python sessions cannot start: their kernels' runtime directory " + root +
                       " cannot be made (" + cause.message() + "); " + RuntimeRootFix(root),
                   cause.errno_value());
}

}  // namespace

std::string RuntimeRootFix(const std::string& root) {
  if (root.starts_with("/run/cordon/") || root == "/run/cordon") {
    return "make /run/cordon a directory the daemon can write (in a container, mount a volume "
           "of its own there: podman or docker --tmpfs /run/cordon, a Kubernetes emptyDir with "
           "medium: Memory at /run/cordon, as deploy/kubernetes/cordon-deployment.yaml does)";
  }
  return "make the state directory writable for the daemon (--state-dir), so that " + root +
         " can be made";
}

sys::Result<void> PrepareRuntimeRoot(const std::string& root) {
  // Each missing component made in turn, so that the error names the one
  // that cannot be (/run itself missing, or read-only).
  for (size_t slash = root.find('/', 1);; slash = root.find('/', slash + 1)) {
    const std::string part = root.substr(0, slash);
    if (!part.empty() && ::mkdir(part.c_str(), 0711) != 0 && errno != EEXIST) {
      return Refused(root, sys::Error::FromErrno("mkdir(\"" + part + "\")"));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) {
    return Refused(root, sys::Error::FromErrno("stat(\"" + root + "\")"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Refused(root, sys::Error("\"" + root + "\" is not a directory", ENOTDIR));
  }
  if ((st.st_mode & 0777) != 0711 && ::chmod(root.c_str(), 0711) != 0) {
    return Refused(root, sys::Error::FromErrno("chmod(\"" + root + "\", 0711)"));
  }
  // It exists; whether a kernel's directory can go in it (a read-only
  // filesystem, another owner's directory) only a try tells.
  const std::string trial = root + "/.trial-" + sys::RandomHex(6);
  if (::mkdir(trial.c_str(), 0700) != 0) {
    return Refused(root, sys::Error::FromErrno("mkdir(\"" + trial + "\")"));
  }
  ::rmdir(trial.c_str());
  return {};
}

}  // namespace cordon::session
