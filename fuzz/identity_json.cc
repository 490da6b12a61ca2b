// A process identity as JSON (proc::IdentityFromJsonText), as `cordon reap`,
// `cordon attest` and the store read it. What parses round-trips.
#include "fuzz_support.h"
#include "proc/identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto identity = proc::IdentityFromJsonText(fuzz::Text(data, size));
  if (!identity) {
    CORDON_FUZZ_CHECK(!identity.error().empty());
    return 0;
  }
  CORDON_FUZZ_CHECK(identity->pid > 0 && identity->ppid >= 0 && !identity->boot_id.empty());
  auto again = proc::IdentityFromJson(proc::ToJson(*identity));
  CORDON_FUZZ_CHECK(again && *again == *identity);
  return 0;
}
