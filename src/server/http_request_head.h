// A request's head (request line and headers, through the blank line),
// parsed by Boost.Beast and then checked for what Beast accepts but vpod
// must not: obsolete line folding, too many headers, a second Host, a
// Transfer-Encoding other than chunked, a compressed body. Pure: no socket,
// so it is unit-tested and fuzzed on its own (tools/fuzz/http_head_fuzz.cpp).
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/http_limits.h"

namespace vpod::server {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// What the connection needs of a head; the parser keeps the rest (and reads
// the body next).
struct RequestHead {
  std::string method;
  std::string path;       // the target without its query
  unsigned version = 11;  // 10 or 11
  bool keep_alive = true;
  bool head_only = false;         // HEAD
  bool accepts_gzip = false;      // Accept-Encoding
  bool expects_continue = false;  // Expect: 100-continue
  bool has_body = false;          // a body follows (Content-Length > 0, or chunked)
  std::string client_request_id;  // X-Request-Id when short and printable, else ""
  std::string authorization;
};

// `head` must end with the blank line ("\r\n\r\n"). On success `parser` holds
// the head (with the body limit set) and is ready for the body; an error is
// the status to answer (400, 413, 415, 431), after which the connection closes.
ApiResult<RequestHead> parse_request_head(std::string_view head, const HttpLimits& limits,
                                          RequestParser& parser);

}  // namespace vpod::server
