// Errors as values (status.h): status code names, Status::to_string and
// Status::with_context.

#include "common/status.h"

namespace vpod {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::not_found: return "not_found";
    case StatusCode::out_of_range: return "out_of_range";
    case StatusCode::resource_exhausted: return "resource_exhausted";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::failed_precondition: return "failed_precondition";
    case StatusCode::data_loss: return "data_loss";
    case StatusCode::internal: return "internal";
    case StatusCode::unimplemented: return "unimplemented";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out(status_code_name(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return {code_, std::move(message)};
}

}  // namespace vpod
