// A cgroup's cgroup.procs (contain::ParsePids), read to find who is left in
// a group before and after teardown. A 0 is kept: the kernel lists a member
// outside the reader's pid namespace as 0, and it still counts as a member
// (the group is not empty). Only a '-' at the very start can make a
// negative number (the kernel never writes one).
#include "contain/cgroup_dir.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  std::string_view text = fuzz::Text(data, size);
  for (pid_t pid : contain::ParsePids(text)) CORDON_FUZZ_CHECK(pid >= 0 || text.starts_with('-'));
  return 0;
}
