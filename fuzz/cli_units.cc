// Durations, sizes and counts (cli::ParseDurationMs, ParseSize, ParseCount),
// as `cordon run --timeout 1.5s --memory 256MiB --pids 64` and the daemon's
// options take them. Never negative; a failure says why.
#include "cli/units.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  std::string_view text = fuzz::Text(data, size);
  for (auto parse : {cli::ParseDurationMs, cli::ParseSize, cli::ParseCount}) {
    auto value = parse(text);
    if (value) {
      CORDON_FUZZ_CHECK(*value >= 0);
    } else {
      CORDON_FUZZ_CHECK(!value.error().empty());
    }
  }
  auto count = cli::ParseCount(text);
  if (count) CORDON_FUZZ_CHECK(cli::ParseSize(text) == count);
  return 0;
}
