// POST /v1/sessions: the request body (api::ParseObject, api::ParseSession).
#include "api/requests.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto body = api::ParseObject(fuzz::Text(data, size));
  if (!body) return 0;
  auto request = api::ParseSession(*body);
  if (!request) {
    CORDON_FUZZ_CHECK(request.error().status == 400);
    return 0;
  }
  CORDON_FUZZ_CHECK(request->kind == "shell" || request->kind == "python");
  if (request->ttl_s) CORDON_FUZZ_CHECK(*request->ttl_s > 0 && *request->ttl_s <= 365LL * 86400);
  return 0;
}
