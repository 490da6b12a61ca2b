// A policy file (--policy FILE, TOML): contain::ApplyPolicy onto a Spec.
#include "contain/policy.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  contain::Spec spec;
  spec.argv = {"/bin/true"};
  auto error = contain::ApplyPolicy(fuzz::Text(data, size), spec);
  if (error) CORDON_FUZZ_CHECK(!error->message().empty());
  return 0;
}
