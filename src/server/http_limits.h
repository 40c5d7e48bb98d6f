// What one client may make the HTTP layer hold, and for how long. Every
// limit is a `vpod serve` flag; the defaults let real clients (openai-python,
// aiohttp benchmark clients, LiteLLM) through untouched and stop a hostile
// one before it costs memory or a connection slot for long.
#pragma once

#include <chrono>
#include <cstddef>

namespace vpod::server {

struct HttpLimits {
  // The request line plus every header line, as sent (431 above).
  std::size_t max_header_bytes = std::size_t{32} << 10;
  std::size_t max_header_count = 100;  // 431 above
  // The body as sent, Content-Length or chunked (413 above). Compressed
  // request bodies are refused (415), so this is also the size after decoding.
  std::size_t max_body_bytes = std::size_t{32} << 20;
  // From a request's first byte until its head is complete.
  std::chrono::milliseconds header_timeout{10'000};
  // From the head until the body is complete.
  std::chrono::milliseconds body_timeout{30'000};
  // An idle keep-alive connection (no request begun) is closed after this.
  // A new connection must begin its request within header_timeout.
  std::chrono::milliseconds keep_alive_timeout{30'000};
  // One write to a client that does not read (the connection is dropped).
  std::chrono::milliseconds write_timeout{30'000};
  // Open connections. Beyond it the oldest idle keep-alive connection is
  // closed to make room; when none is idle the newcomer gets 503.
  int max_connections = 4096;
  // A stream's output waiting for a client that does not read, beyond what
  // the kernel's socket buffer holds; above it the request is aborted.
  std::size_t max_stream_buffer_bytes = std::size_t{4} << 20;
};

}  // namespace vpod::server
