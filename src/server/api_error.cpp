// OpenAI-shaped errors (api_error.h): the JSON body and the mapping from a
// Status code to an HTTP status and error type.
#include "server/api_error.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace vpod::server {

std::string_view json_type_name(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: return "null";
    case nlohmann::ordered_json::value_t::object: return "an object";
    case nlohmann::ordered_json::value_t::array: return "an array";
    case nlohmann::ordered_json::value_t::string: return "a string";
    case nlohmann::ordered_json::value_t::boolean: return "a boolean";
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return "an integer";
    case nlohmann::ordered_json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

ApiError bad_request(std::string message, std::string param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}

ApiError unauthorized() {
  return {401, "Missing or invalid API key: send it as 'Authorization: Bearer <key>'",
          "invalid_request_error", "", "invalid_api_key"};
}

ApiError model_not_found(const std::string& model) {
  return {404, fmt::format("The model '{}' does not exist", model), "invalid_request_error",
          "model", "model_not_found"};
}

ApiError route_not_found(const std::string& method, const std::string& path) {
  return {404, fmt::format("No route for {} {}", method, path), "invalid_request_error", "",
          "not_found"};
}

ApiError payload_too_large(std::size_t limit_bytes) {
  return {413, fmt::format("The request body is larger than the limit of {} bytes", limit_bytes),
          "invalid_request_error", "", "request_too_large"};
}

ApiError http_error(int status, std::string message, std::string code) {
  return {status, std::move(message), "invalid_request_error", "", std::move(code)};
}

ApiError service_unavailable(std::string message) {
  return {503, std::move(message), "service_unavailable", "", "service_unavailable"};
}

ApiError server_error(std::string message) {
  return {500, std::move(message), "internal_error", "", "internal_error"};
}

ApiError from_status(const Status& status, std::string param) {
  switch (status.code()) {
    case StatusCode::invalid_argument:
    case StatusCode::out_of_range:
    case StatusCode::failed_precondition:
    case StatusCode::unimplemented: return bad_request(status.message(), std::move(param));
    case StatusCode::not_found: {
      ApiError error = bad_request(status.message(), std::move(param));
      error.http_status = 404;
      return error;
    }
    case StatusCode::unavailable:
    case StatusCode::resource_exhausted: return service_unavailable(status.message());
    case StatusCode::ok:
    case StatusCode::data_loss:
    case StatusCode::internal: break;
  }
  return server_error(status.message());
}

nlohmann::json error_json(const ApiError& error) {
  auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(s);
  };
  return {{"error",
           {{"message", error.message},
            {"type", error.type},
            {"param", or_null(error.param)},
            {"code", or_null(error.code)}}}};
}

std::string error_body(const ApiError& error) {
  // Messages may quote client input: never let invalid UTF-8 throw here.
  return error_json(error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vpod::server
