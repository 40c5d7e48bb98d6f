// The request-head checks (http_request_head.h): Beast's parse, then what
// vpod refuses beyond it.
#include "server/http_request_head.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <cstdint>
#include <iterator>

#include "server/gzip.h"

namespace vpod::server {
namespace {

namespace http = boost::beast::http;

// A client's X-Request-Id is echoed back and logged when it is this short
// and printable.
constexpr std::size_t kMaxRequestIdBytes = 128;

bool printable(std::string_view s) {
  for (char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// An obsolete line folding (a header line continued on the next line that
// begins with a space or tab): rejected, as RFC 9112 5.2 allows, since
// proxies disagree on how to unfold it.
bool has_obs_fold(std::string_view head) {
  for (std::size_t at = head.find("\r\n"); at != std::string_view::npos;
       at = head.find("\r\n", at + 2)) {
    if (at + 2 < head.size() && (head[at + 2] == ' ' || head[at + 2] == '\t')) return true;
  }
  return false;
}

}  // namespace

ApiResult<RequestHead> parse_request_head(std::string_view head, const HttpLimits& limits,
                                          RequestParser& parser) {
  if (head.size() > limits.max_header_bytes) {
    return http_error(
        431, fmt::format("The request line and headers exceed {} bytes", limits.max_header_bytes),
        "request_header_fields_too_large");
  }
  if (has_obs_fold(head)) {
    return http_error(400, "Obsolete header line folding is not accepted", "bad_request");
  }
  parser.header_limit(
      static_cast<std::uint32_t>(std::min<std::size_t>(limits.max_header_bytes, UINT32_MAX)));
  parser.body_limit(limits.max_body_bytes);
  parser.eager(false);  // stop after the head: checks come before the body
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  if (ec == http::error::body_limit) return payload_too_large(limits.max_body_bytes);
  if (ec || !parser.is_header_done()) {
    return http_error(400,
                      fmt::format("Bad HTTP request: {}", ec ? ec.message() : "incomplete head"),
                      "bad_request");
  }

  const auto& req = parser.get();
  const std::size_t count = static_cast<std::size_t>(std::distance(req.begin(), req.end()));
  if (count > limits.max_header_count) {
    return http_error(431,
                      fmt::format("The request has {} headers; at most {} are accepted", count,
                                  limits.max_header_count),
                      "request_header_fields_too_large");
  }
  if (req.count(http::field::host) > 1) {
    return http_error(400, "More than one Host header", "bad_request");
  }
  // RFC 9112 6.1: a request whose final transfer coding is not chunked has
  // no reliable length. vpod decodes no other coding, so only "chunked".
  if (req.count(http::field::transfer_encoding) > 0 &&
      !boost::beast::iequals(req[http::field::transfer_encoding], "chunked")) {
    return http_error(400, "Transfer-Encoding must be chunked alone", "bad_request");
  }
  const std::string_view encoding = req[http::field::content_encoding];
  if (!encoding.empty() && !boost::beast::iequals(encoding, "identity")) {
    return http_error(415,
                      "Compressed request bodies are not accepted (Content-Encoding must be "
                      "identity or absent)",
                      "unsupported_media_type");
  }

  RequestHead h;
  h.method = std::string(req.method_string());
  const std::string_view target = req.target();
  h.path = std::string(target.substr(0, target.find('?')));
  h.version = req.version();
  h.keep_alive = req.keep_alive();
  h.head_only = req.method() == http::verb::head;
  h.accepts_gzip = accepts_gzip(req[http::field::accept_encoding]);
  h.expects_continue = boost::beast::iequals(req[http::field::expect], "100-continue");
  h.has_body = !parser.is_done();
  const std::string_view id = req["X-Request-Id"];
  if (!id.empty() && id.size() <= kMaxRequestIdBytes && printable(id)) {
    h.client_request_id = std::string(id);
  }
  h.authorization = std::string(req[http::field::authorization]);
  return h;
}

}  // namespace vpod::server
