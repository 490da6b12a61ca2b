#include "proc/attest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "closure/digest.h"
#include "proc/stat.h"
#include "sys/fd.h"

namespace cordon::proc {
namespace {

std::unexpected<AttestFailure> Reject(std::string reason, std::string message) {
  return std::unexpected(AttestFailure{std::move(reason), std::move(message)});
}

std::string Pid(pid_t pid) { return std::to_string(pid); }

// The parent of every live process, from one pass over /proc.
std::map<pid_t, pid_t> Parents() {
  std::map<pid_t, pid_t> parents;
  auto pids = ListPids();
  if (!pids) return parents;
  for (pid_t pid : *pids) {
    if (auto st = ReadStat(pid); st && !st->exited()) parents[pid] = st->ppid;
  }
  return parents;
}

bool DescendsFrom(pid_t pid, pid_t root, const std::map<pid_t, pid_t>& parents) {
  for (int hops = 0; hops < 4096; ++hops) {
    auto it = parents.find(pid);
    if (it == parents.end() || it->second <= 0) return false;
    if (it->second == root) return true;
    pid = it->second;
  }
  return false;
}

struct ExeInfo {
  struct stat st {};
  std::string sha256;
};

// Opens the process's executable through /proc/PID/exe (the file it runs,
// whatever its path now names) and describes it.
std::expected<ExeInfo, std::string> Executable(pid_t pid, bool digest) {
  auto fd = sys::Open("/proc/" + Pid(pid) + "/exe", O_RDONLY);
  if (!fd) return std::unexpected(fd.error().message());
  ExeInfo info;
  if (::fstat(fd->get(), &info.st) != 0) return std::unexpected("fstat of the executable failed");
  if (digest) {
    auto d = closure::DigestFile(fd->get(), info.st, "/proc/" + Pid(pid) + "/exe");
    if (!d) return std::unexpected(d.error().message);
    info.sha256 = d->sha256;
  }
  return info;
}

// Whether (dev, ino) is one of the verified closure's files.
bool Pinned(const closure::Verification& closure, const struct stat& st) {
  for (const auto& file : closure.files) {
    struct stat pinned {};
    if (::fstat(file.fd.get(), &pinned) == 0 && pinned.st_dev == st.st_dev &&
        pinned.st_ino == st.st_ino) {
      return true;
    }
  }
  return false;
}

// "/proc/self/fd/N", "/proc/PID/fd/N" or "/dev/fd/N": the N, else -1.
int FdPath(std::string_view arg) {
  std::string_view rest;
  if (arg.starts_with("/dev/fd/")) {
    rest = arg.substr(8);
  } else if (arg.starts_with("/proc/")) {
    size_t fd = arg.find("/fd/");
    if (fd == std::string_view::npos) return -1;
    std::string_view who = arg.substr(6, fd - 6);
    if (who != "self" && (who.empty() || !std::all_of(who.begin(), who.end(), ::isdigit))) {
      return -1;
    }
    rest = arg.substr(fd + 4);
  } else {
    return -1;
  }
  if (rest.empty() || rest.size() > 9 || !std::all_of(rest.begin(), rest.end(), ::isdigit)) {
    return -1;
  }
  return std::stoi(std::string(rest));
}

// A process launched through a descriptor path (an interpreter reading its
// script from /dev/fd/N, a launcher exec'ing /proc/self/fd/N) is accepted
// only when that descriptor still resolves to a pinned file.
std::optional<AttestFailure> CheckFdLaunch(pid_t pid, const AttestExpectations& expect) {
  std::vector<std::string> argv = ReadArgv(pid);
  for (size_t i = 0; i < argv.size() && i < 2; ++i) {
    int n = FdPath(argv[i]);
    if (n < 0) continue;
    std::string why = "pid " + Pid(pid) + " was launched through " + argv[i];
    if (!expect.closure) {
      return AttestFailure{"fd_exec_unpinned", why + ", and no closure was given to check it"};
    }
    struct stat st {};
    if (::stat(("/proc/" + Pid(pid) + "/fd/" + std::to_string(n)).c_str(), &st) != 0) {
      return AttestFailure{"fd_exec_unpinned",
                           why + ", and descriptor " + std::to_string(n) + " is no longer open"};
    }
    if (!Pinned(*expect.closure, st)) {
      return AttestFailure{"fd_exec_unpinned",
                           why + ", and descriptor " + std::to_string(n) +
                               " does not resolve to a file of the pinned closure"};
    }
  }
  return std::nullopt;
}

std::string ReadCwd(pid_t pid) {
  char buf[4096];
  ssize_t n = ::readlink(("/proc/" + Pid(pid) + "/cwd").c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::vector<std::string> ReadArgv(pid_t pid) {
  std::vector<std::string> argv;
  auto text = sys::ReadFile("/proc/" + Pid(pid) + "/cmdline", 1 << 20);
  if (!text) return argv;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\0', start);
    if (end == std::string::npos) end = text->size();
    argv.push_back(text->substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

std::expected<std::vector<Identity>, AttestFailure> Attest(const Identity& root,
                                                           const AttestExpectations& expect) {
  if (Mismatch m = Verify(root); m != Mismatch::kNone) {
    return Reject("root_changed", "the root pid " + Pid(root.pid) +
                                      " is not that process any more (" +
                                      std::string(MismatchName(m)) + ")");
  }
  std::map<pid_t, pid_t> parents = Parents();

  std::vector<pid_t> candidates;
  if (expect.target) {
    if (Mismatch m = Verify(*expect.target); m != Mismatch::kNone) {
      return Reject("target_changed", "the target pid " + Pid(expect.target->pid) +
                                          " is not that process any more (" +
                                          std::string(MismatchName(m)) + ")");
    }
    if (!DescendsFrom(expect.target->pid, root.pid, parents)) {
      return Reject("not_descendant",
                    "pid " + Pid(expect.target->pid) + " does not descend from " + Pid(root.pid));
    }
    candidates.push_back(expect.target->pid);
  } else {
    for (const auto& [pid, ppid] : parents) {
      if (pid != root.pid && DescendsFrom(pid, root.pid, parents)) candidates.push_back(pid);
    }
  }

  // Each expectation narrows the candidates; the first that leaves none
  // names the reason.
  if (expect.title) {
    std::erase_if(candidates, [&](pid_t pid) {
      std::vector<std::string> argv = ReadArgv(pid);
      return argv.empty() || argv[0] != *expect.title;
    });
    if (candidates.empty()) {
      return Reject("no_matching_child", "no descendant of " + Pid(root.pid) + " has the title \"" +
                                             *expect.title + "\"");
    }
  } else if (candidates.empty()) {
    return Reject("no_matching_child", "pid " + Pid(root.pid) + " has no descendants");
  }
  if (expect.exe_sha256 || expect.closure) {
    std::string seen;
    std::erase_if(candidates, [&](pid_t pid) {
      auto exe = Executable(pid, expect.exe_sha256.has_value());
      if (!exe) {
        seen += " pid " + Pid(pid) + ": " + exe.error() + ";";
        return true;
      }
      if (expect.exe_sha256 && exe->sha256 != *expect.exe_sha256) {
        seen += " pid " + Pid(pid) + " runs " + exe->sha256 + ";";
        return true;
      }
      if (expect.closure && !Pinned(*expect.closure, exe->st)) {
        seen += " pid " + Pid(pid) + " runs a file outside the closure;";
        return true;
      }
      return false;
    });
    if (candidates.empty()) {
      return Reject("snapshot_digest", "no candidate runs the expected executable:" + seen);
    }
  }
  if (expect.cwd) {
    std::string seen;
    std::erase_if(candidates, [&](pid_t pid) {
      std::string cwd = ReadCwd(pid);
      if (cwd == *expect.cwd) return false;
      seen += " pid " + Pid(pid) + " is in \"" + cwd + "\";";
      return true;
    });
    if (candidates.empty())
      return Reject("wrong_cwd", "no candidate is in \"" + *expect.cwd + "\":" + seen);
  }
  if (candidates.size() > 1) {
    std::string pids;
    for (pid_t pid : candidates) pids += " " + Pid(pid);
    return Reject("ambiguous_child", "more than one descendant matches:" + pids);
  }

  // The chain, target first, each link observed now.
  std::vector<Identity> chain;
  pid_t pid = candidates[0];
  while (true) {
    auto id = ReadIdentity(pid);
    if (!id) return Reject("unreadable", "pid " + Pid(pid) + " vanished while attesting");
    if (auto bad = CheckFdLaunch(pid, expect)) return std::unexpected(*bad);
    chain.push_back(*id);
    if (pid == root.pid) break;
    pid = id->ppid;
    if (pid <= 0 || chain.size() > 4096) {
      return Reject("not_descendant", "the ancestry of " + Pid(candidates[0]) +
                                          " no longer reaches " + Pid(root.pid));
    }
  }
  // The root looked up at the end must still be the root given.
  if (chain.back().start_ticks != root.start_ticks) {
    return Reject("root_changed", "the root changed while attesting");
  }
  return chain;
}

}  // namespace cordon::proc
