#include "proc/stat.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <charconv>
#include <memory>

#include "sys/fd.h"

namespace cordon::proc {
namespace {

template <typename T>
bool ParseNumber(std::string_view s, T& out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

sys::Result<Stat> ParseStat(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return sys::Fail("parse /proc/PID/stat: " + std::string(why), EINVAL);
  };
  Stat st;
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return bad("no command name in parentheses");
  }
  std::string_view pid_text = text.substr(0, open);
  while (!pid_text.empty() && pid_text.back() == ' ') pid_text.remove_suffix(1);
  if (!ParseNumber(pid_text, st.pid)) return bad("bad pid");
  st.comm = std::string(text.substr(open + 1, close - open - 1));

  // Fields after the name, numbered as in proc(5): 3 is state.
  std::vector<std::string_view> fields;
  std::string_view rest = text.substr(close + 1);
  size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && (rest[pos] == ' ' || rest[pos] == '\n')) ++pos;
    size_t end = pos;
    while (end < rest.size() && rest[end] != ' ' && rest[end] != '\n') ++end;
    if (end > pos) fields.push_back(rest.substr(pos, end - pos));
    pos = end;
  }
  auto field = [&](int number) { return fields[static_cast<size_t>(number - 3)]; };
  if (fields.size() < 20) return bad("too few fields");
  if (field(3).size() != 1) return bad("bad state");
  st.state = field(3)[0];
  if (!ParseNumber(field(4), st.ppid) || !ParseNumber(field(5), st.pgrp) ||
      !ParseNumber(field(6), st.session) || !ParseNumber(field(22), st.start_ticks)) {
    return bad("bad numeric field");
  }
  return st;
}

sys::Result<Stat> ReadStat(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  CORDON_ASSIGN_OR_RETURN(std::string text, sys::ReadFile(path, 4096));
  auto st = ParseStat(text);
  if (!st) return std::unexpected(st.error().Context(path));
  return st;
}

sys::Result<std::vector<pid_t>> ListPids() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/proc"), ::closedir);
  if (!dir) return sys::FailErrno("opendir(\"/proc\")");
  std::vector<pid_t> pids;
  while (struct dirent* entry = ::readdir(dir.get())) {
    pid_t pid;
    std::string_view name(entry->d_name);
    if (ParseNumber(name, pid)) pids.push_back(pid);
  }
  return pids;
}

std::vector<Stat> GroupMembersSince(const std::vector<pid_t>& candidates, pid_t pgid,
                                    uint64_t since_ticks) {
  std::vector<Stat> members;
  for (pid_t pid : candidates) {
    auto st = ReadStat(pid);
    if (st && st->pgrp == pgid && !st->exited() && st->start_ticks >= since_ticks) {
      members.push_back(std::move(*st));
    }
  }
  return members;
}

uint64_t TicksSinceBoot() {
  static const uint64_t hz = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  struct timespec now {};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<uint64_t>(now.tv_sec) * hz +
         static_cast<uint64_t>(now.tv_nsec) / (1'000'000'000 / hz);
}

}  // namespace cordon::proc
