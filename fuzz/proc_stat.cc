// /proc/PID/stat (proc::ParseStat): the command name, which a process sets
// itself (prctl(PR_SET_NAME), its executable's name), may hold spaces, ')'
// and digits; it ends at the last ')'.
#include "fuzz_support.h"
#include "proc/stat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  std::string_view text = fuzz::Text(data, size);
  auto st = proc::ParseStat(text);
  if (!st) return 0;
  CORDON_FUZZ_CHECK(st->comm.size() < text.size());
  CORDON_FUZZ_CHECK(st->comm.find(')') == std::string::npos ||
                    text.find(st->comm + ")") != std::string_view::npos);
  (void)st->exited();
  return 0;
}
