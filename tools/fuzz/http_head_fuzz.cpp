// libFuzzer target: request heads (src/server/http_request_head.h) on
// arbitrary bytes, made to end with the blank line as the connection hands
// them over. Any input must give a head or a 4xx error; never a crash, hang
// or out-of-bounds read (run under ASan: cmake -DVPOD_FUZZ=ON with clang).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/check.h"
#include "server/http_request_head.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string head(reinterpret_cast<const char*>(data), size);
  head += "\r\n\r\n";
  vpod::server::HttpLimits limits;
  vpod::server::RequestParser parser;
  auto r = vpod::server::parse_request_head(head, limits, parser);
  if (r.ok()) {
    VPOD_CHECK(!r->method.empty());
  } else {
    const int s = r.error().http_status;
    VPOD_CHECK(s == 400 || s == 413 || s == 415 || s == 431);
  }
  return 0;
}
