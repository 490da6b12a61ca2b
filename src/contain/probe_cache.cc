#include "contain/probe_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

#include "proc/identity.h"
#include "sys/fd.h"

namespace cordon::contain {
namespace {

constexpr std::string_view kHeader = "cordon namespace probe 1\n";
constexpr std::string_view kEnd = "--\n";

// A file's content without its trailing newline, or "-" when it cannot be
// read (absent: a kernel without that knob, which is a fact too).
std::string Fact(const char* path) {
  auto text = sys::ReadFile(path, 4096);
  if (!text) return "-" + std::to_string(text.error().errno_value());
  while (!text->empty() && (text->back() == '\n' || text->back() == '\0')) text->pop_back();
  return *text;
}

// Which file this is: a replaced binary (a new inode) or one changed in
// place (size, mtime) reads differently.
std::string FileIdentity(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "-" + std::to_string(errno);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
         std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// Which namespace (or directory): its inode. Its times say nothing here (a
// /proc/self/ns link's are the time it was looked at; the root's change
// with every file made in it).
std::string InodeIdentity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "-" + std::to_string(errno);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

// SELinux's status page (version, sequence, enforcing, policy loads), in
// hex: it changes with every policy load and enforcing switch.
std::string SelinuxStatus() {
  auto page = sys::ReadFile("/sys/fs/selinux/status", 64);
  if (!page) return "-" + std::to_string(page.error().errno_value());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : page->substr(0, 20)) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// The lines of /proc/self/status that bear on making a user namespace: the
// seccomp mode (a host filter makes the probe thorough), no_new_privs and
// the capabilities.
std::string StatusFacts() {
  auto status = sys::ReadFile("/proc/self/status", 1 << 16);
  if (!status) return "-";
  std::string out;
  std::string_view rest(*status);
  while (!rest.empty()) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    for (std::string_view name : {"Seccomp:", "NoNewPrivs:", "CapEff:", "CapPrm:"}) {
      if (line.starts_with(name)) {
        out += std::string(line) + ";";
        break;
      }
    }
  }
  return out;
}

}  // namespace

std::string NamespaceProbeKey() {
  std::string key(kHeader);
  auto line = [&](std::string_view name, const std::string& value) {
    key += std::string(name) + "=" + value + "\n";
  };
  // Another kernel is another boot: the boot id covers both.
  auto boot = proc::BootId();
  line("boot_id", boot ? *boot : Fact("/proc/sys/kernel/random/boot_id"));
  line("exe", FileIdentity("/proc/self/exe"));
  line("root", InodeIdentity("/"));  // a chroot is refused a user namespace
  line("ids", std::to_string(::getuid()) + ":" + std::to_string(::geteuid()) + ":" +
                  std::to_string(::getgid()) + ":" + std::to_string(::getegid()));
  for (const char* ns : {"user", "mnt"}) {
    line(std::string("ns_") + ns, InodeIdentity("/proc/self/ns/" + std::string(ns)));
  }
  line("status", StatusFacts());
  for (const char* sysctl :
       {"/proc/sys/user/max_user_namespaces", "/proc/sys/user/max_net_namespaces",
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"}) {
    line(sysctl, Fact(sysctl));
  }
  // The LSM's view of this process, and a policy reload where the LSM
  // counts them (AppArmor's revision, SELinux's status sequence).
  line("lsm", Fact("/proc/self/attr/current"));
  line("apparmor_revision", Fact("/sys/kernel/security/apparmor/revision"));
  line("selinux", SelinuxStatus());
  return key;
}

std::optional<NamespaceSupport> LoadNamespaceProbe(const std::string& path,
                                                   const std::string& key) {
  auto text = sys::ReadFile(path, 1 << 16);
  if (!text) return std::nullopt;
  std::string_view rest(*text);
  if (!rest.starts_with(key)) return std::nullopt;
  rest.remove_prefix(key.size());
  if (!rest.starts_with(kEnd)) return std::nullopt;
  rest.remove_prefix(kEnd.size());
  NamespaceSupport s;
  s.available = true;
  if (rest == "network=1\n") {
    s.network = true;
  } else if (rest != "network=0\n") {
    return std::nullopt;
  }
  return s;
}

sys::Result<void> SaveNamespaceProbe(const std::string& path, const std::string& key,
                                     const NamespaceSupport& support) {
  if (!support.available) {
    return sys::Fail("only an available namespace probe is cached", EINVAL);
  }
  std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    CORDON_ASSIGN_OR_RETURN(
        sys::UniqueFd fd,
        sys::Open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    std::string content =
        key + std::string(kEnd) + (support.network ? "network=1\n" : "network=0\n");
    if (auto written = sys::WriteAll(fd.get(), content); !written) {
      ::unlink(temp.c_str());
      return written;
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    auto failed = sys::FailErrno("rename(\"" + temp + "\", \"" + path + "\")");
    ::unlink(temp.c_str());
    return failed;
  }
  return {};
}

void DropNamespaceProbe(const std::string& path) { ::unlink(path.c_str()); }

}  // namespace cordon::contain
