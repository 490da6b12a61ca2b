#include "api/log.h"

#include <unistd.h>

#include "store/store.h"
#include "sys/fd.h"
#include "sys/json_text.h"

namespace cordon::api {

void Log(std::string_view level, std::string_view event, nlohmann::json fields) {
  nlohmann::json line = {{"ts_ms", store::NowMs()}, {"level", level}, {"event", event}};
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) line[key] = value;
  }
  // One write(2) per line keeps lines whole.
  (void)sys::WriteAll(STDERR_FILENO, sys::JsonText(line) + "\n");
}

}  // namespace cordon::api
