// A closure's manifest (closure::ParseManifest). What parses must round-trip:
// its JSON parses back to the same manifest, and its own pin checks.
#include "closure/manifest.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  std::string_view text = fuzz::Text(data, size);
  auto manifest = closure::ParseManifest(text);
  if (!manifest) return 0;
  for (const auto& e : manifest->entries) {
    CORDON_FUZZ_CHECK(!closure::PathProblem(e.path));
  }
  auto again = closure::ParseManifest(closure::ToJson(*manifest).dump());
  CORDON_FUZZ_CHECK(again && *again == *manifest);
  auto pin = closure::Pin(*manifest);
  CORDON_FUZZ_CHECK(pin && pin->size() == 64);
  CORDON_FUZZ_CHECK(!closure::CheckPin(*manifest, *pin));
  CORDON_FUZZ_CHECK(closure::ParsePinnedManifest(text, *pin).has_value());
  return 0;
}
