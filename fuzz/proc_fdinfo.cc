// /proc/self/fdinfo/N of a pidfd (proc::PidFdInfoAlive): its "Pid:" line is
// -1 once the process has been reaped.
#include "fuzz_support.h"
#include "proc/signal_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  std::string_view text = fuzz::Text(data, size);
  bool alive = proc::PidFdInfoAlive(text);
  if (alive) CORDON_FUZZ_CHECK(text.find("\nPid:") != std::string_view::npos);
  return 0;
}
