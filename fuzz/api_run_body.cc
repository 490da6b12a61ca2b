// POST /v1/runs: the request body, as the daemon parses it (api::ParseObject,
// then api::ParseRun, which maps env, limits, require, isolation and
// stdin_b64 onto a contain::Spec).
#include "api/requests.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto body = api::ParseObject(fuzz::Text(data, size));
  if (!body) return 0;
  auto spec = api::ParseRun(*body);
  if (!spec) {
    CORDON_FUZZ_CHECK(spec.error().status == 400);
    CORDON_FUZZ_CHECK(!spec.error().message.empty());
    return 0;
  }
  CORDON_FUZZ_CHECK(!spec->owner.empty());
  if (spec->workspace) CORDON_FUZZ_CHECK(spec->workspace->is_absolute());
  return 0;
}
