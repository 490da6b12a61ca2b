// A pinned closure (closure::ParsePinnedManifest): the input is the pin, a
// newline, and the manifest's text. Also closure::PathProblem on the pin
// line, as a path a manifest or `cordon closure` might name.
#include "closure/manifest.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto [pin, text] = fuzz::Cut(fuzz::Text(data, size), "\n");
  (void)closure::PathProblem(pin);
  auto manifest = closure::ParsePinnedManifest(text, pin);
  if (!manifest) return 0;
  auto actual = closure::Pin(*manifest);
  CORDON_FUZZ_CHECK(actual && *actual == pin);
  return 0;
}
