// Errors as values: Status for user-facing failures (bad input, out of memory,
// a driver refusing a call), Result<T> for a value or the Status explaining why
// there is none. Internal invariant violations use VPOD_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/check.h"

namespace vpod {

enum class StatusCode {
  ok,
  invalid_argument,     // the caller's input is wrong (HTTP body, file, flag)
  not_found,            // a named file, model, route or id does not exist
  out_of_range,         // a length or index beyond a configured limit
  resource_exhausted,   // out of KV pages, slots or device memory
  unavailable,          // no GPU, no driver, server draining
  failed_precondition,  // the call is valid but not in the current state
  data_loss,            // a file is corrupt or truncated
  internal,             // a library or driver call failed unexpectedly
  unimplemented,        // a supported-looking input we do not handle (named)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: max_tokens must be >= 1"
  std::string to_string() const;

  // Prefixes context: Status(..., "bad dtype").with_context("model.safetensors")
  // gives "model.safetensors: bad dtype".
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::invalid_argument, std::move(message)};
}
inline Status not_found(std::string message) { return {StatusCode::not_found, std::move(message)}; }
inline Status out_of_range(std::string message) {
  return {StatusCode::out_of_range, std::move(message)};
}
inline Status resource_exhausted(std::string message) {
  return {StatusCode::resource_exhausted, std::move(message)};
}
inline Status unavailable(std::string message) {
  return {StatusCode::unavailable, std::move(message)};
}
inline Status failed_precondition(std::string message) {
  return {StatusCode::failed_precondition, std::move(message)};
}
inline Status data_loss(std::string message) { return {StatusCode::data_loss, std::move(message)}; }
inline Status internal_error(std::string message) {
  return {StatusCode::internal, std::move(message)};
}
inline Status unimplemented(std::string message) {
  return {StatusCode::unimplemented, std::move(message)};
}

// A value or the Status explaining its absence. Never holds an ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    VPOD_CHECK_MSG(!std::get<Status>(state_).ok(), "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status ok_status;
    return ok() ? ok_status : std::get<Status>(state_);
  }

  T& value() & {
    VPOD_CHECK_MSG(ok(), "Result::value() on error: " + std::get<Status>(state_).to_string());
    return std::get<T>(state_);
  }
  const T& value() const& {
    VPOD_CHECK_MSG(ok(), "Result::value() on error: " + std::get<Status>(state_).to_string());
    return std::get<T>(state_);
  }
  T&& value() && {
    VPOD_CHECK_MSG(ok(), "Result::value() on error: " + std::get<Status>(state_).to_string());
    return std::get<T>(std::move(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace vpod

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define VPOD_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::vpod::Status vpod_status_ = (expr);        \
    if (!vpod_status_.ok()) return vpod_status_; \
  } while (0)

#define VPOD_CONCAT_INNER_(a, b) a##b
#define VPOD_CONCAT_(a, b) VPOD_CONCAT_INNER_(a, b)

// VPOD_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns
// its Status.
#define VPOD_ASSIGN_OR_RETURN(decl, expr) \
  VPOD_ASSIGN_OR_RETURN_IMPL_(VPOD_CONCAT_(vpod_result_, __LINE__), decl, expr)
#define VPOD_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  decl = std::move(tmp).value()
