// /proc/self/mountinfo and /proc/self/cgroup (contain::ParseCgroupLayout):
// where the cgroup hierarchies are mounted (escaped mount points, v1
// controllers in the super options) and where this process sits in each.
// The input is mountinfo's text, a line "--", and cgroup's text.
#include "contain/cgroup_layout.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto [mountinfo, cgroup] = fuzz::Cut(fuzz::Text(data, size), "\n--\n");
  contain::CgroupLayout layout = contain::ParseCgroupLayout(mountinfo, cgroup);
  if (layout.v2) CORDON_FUZZ_CHECK(layout.v2->version == 2);
  for (const auto& [controller, h] : layout.v1) {
    CORDON_FUZZ_CHECK(h.version == 1);
    CORDON_FUZZ_CHECK(h.controllers.contains(controller));
  }
  return 0;
}
