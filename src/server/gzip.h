// gzip for response bodies (RFC 1952 through zlib), and the Accept-Encoding
// check that decides whether a client takes it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vpod::server {

// True when `accept_encoding` (an Accept-Encoding header value) lists gzip,
// or `*`, with a q-value above zero.
bool accepts_gzip(std::string_view accept_encoding);

// The gzip member holding `data`; std::nullopt if zlib fails (the caller
// then sends the body as it is).
std::optional<std::string> gzip_compress(std::string_view data);

}  // namespace vpod::server
