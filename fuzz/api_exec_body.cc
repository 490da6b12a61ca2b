// POST /v1/sessions/{id}/exec: the request body (api::ParseObject,
// api::ParseExec).
#include "api/requests.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto body = api::ParseObject(fuzz::Text(data, size));
  if (!body) return 0;
  auto call = api::ParseExec(*body);
  if (!call) {
    CORDON_FUZZ_CHECK(call.error().status == 400);
    return 0;
  }
  if (call->timeout_ms) CORDON_FUZZ_CHECK(*call->timeout_ms > 0);
  return 0;
}
