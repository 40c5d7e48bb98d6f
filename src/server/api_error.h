// OpenAI-shaped errors: an HTTP status and {"error": {"message", "type",
// "param", "code"}}. Every failure the server reports to a client is one of
// these, built where the failure is understood, so `param` can name the field.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/status.h"

namespace vpod::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; "" is sent as null
  std::string code;   // a machine-readable code; "" is sent as null
};

// 400 invalid_request_error; `param` names the field.
ApiError bad_request(std::string message, std::string param = {});
// A JSON value's kind as an error message says it: "a string", "an integer", ...
std::string_view json_type_name(const nlohmann::ordered_json& v);
// 401: missing or wrong `Authorization: Bearer` key.
ApiError unauthorized();
// 404 for a model that is not served.
ApiError model_not_found(const std::string& model);
// 404 for an unknown route or method.
ApiError route_not_found(const std::string& method, const std::string& path);
// 413: the body is over the configured limit.
ApiError payload_too_large(std::size_t limit_bytes);
// An HTTP-level refusal (400 bad framing, 415, 431, ...) with a code.
ApiError http_error(int status, std::string message, std::string code);
// 503 while the model loads or the server drains.
ApiError service_unavailable(std::string message);
// 500: a failure inside vpod, not the client's fault.
ApiError server_error(std::string message);
// Maps a backend Status to an error (invalid_argument/out_of_range -> 400,
// not_found -> 404, unavailable/resource_exhausted -> 503, else 500).
ApiError from_status(const Status& status, std::string param = {});

// {"error": {"message", "type", "param", "code"}}
nlohmann::json error_json(const ApiError& error);
// error_json() as compact JSON.
std::string error_body(const ApiError& error);

// A value or the ApiError explaining its absence.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : state_(std::move(value)) {}         // NOLINT: implicit by design
  ApiResult(ApiError error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(state_); }
  const ApiError& error() const {
    VPOD_CHECK(!ok());
    return std::get<ApiError>(state_);
  }
  T& value() & {
    VPOD_CHECK_MSG(ok(), "ApiResult::value() on error: " + std::get<ApiError>(state_).message);
    return std::get<T>(state_);
  }
  const T& value() const& {
    VPOD_CHECK_MSG(ok(), "ApiResult::value() on error: " + std::get<ApiError>(state_).message);
    return std::get<T>(state_);
  }
  T&& value() && {
    VPOD_CHECK_MSG(ok(), "ApiResult::value() on error: " + std::get<ApiError>(state_).message);
    return std::get<T>(std::move(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, ApiError> state_;
};

}  // namespace vpod::server
