#include "session/error.h"

namespace cordon::session {

Error FromAdmit(const contain::AdmitError& e) {
  nlohmann::json missing = nlohmann::json::array();
  for (const auto& m : e.missing) {
    missing.push_back(
        {{"capability", contain::CapabilityName(m.capability)}, {"reason", m.reason}});
  }
  switch (e.kind) {
    case contain::AdmitError::Kind::kInvalid:
      return Error{Error::Kind::kInvalid, e.message, e.field, nullptr};
    case contain::AdmitError::Kind::kRefused:
      return Error{Error::Kind::kInvalid, e.message, "require", {{"missing", missing}}};
    case contain::AdmitError::Kind::kInternal:
      break;
  }
  return Error{Error::Kind::kInternal, e.message, "", nullptr};
}

}  // namespace cordon::session
