// The OpenAI-compatible HTTP server on cpp-httplib.
//
// Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions,
// POST /tokenize, POST /detokenize, GET /health, GET /metrics, GET /version.
// With an API key, every route but /health, /metrics and /version needs
// `Authorization: Bearer <key>`.
//
// Concurrency: one worker thread per open connection (cpp-httplib's model),
// so the pool is sized for hundreds of concurrent streams. A generation
// request's thread submits its sequences and then waits on them, in ticks of
// kPollInterval, checking between ticks whether the client has gone (then it
// aborts) and whether the server is shutting down.
//
// Lifecycle: bind() -> serve() on some thread (blocks) -> attach() the
// backend once the model is loaded (until then /health and the API say 503)
// -> shutdown() from any thread: stop taking generation requests (503),
// let in-flight ones finish until the drain deadline, abort the rest, stop.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/backend.h"
#include "server/metrics.h"

namespace vpod::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (see HttpServer::port())
  std::string api_key;  // "": no authentication
  std::size_t max_body_bytes = std::size_t{32} << 20;
  // Worker threads = connections served at once (each stream holds one).
  int http_threads = 512;
  // Clients that reuse connections (openai-python, aiohttp benchmark clients)
  // keep them for many requests; idle ones are closed after the timeout.
  int keep_alive_max_requests = 10000;
  int keep_alive_timeout_s = 30;
  int read_timeout_s = 30;   // reading a request's head and body
  int write_timeout_s = 30;  // one write to a client that does not read
  // Pending connections the kernel queues before accept (bursts of clients).
  int listen_backlog = 1024;
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket (a clear error when the port is taken).
  Status bind();
  int port() const;
  // Accepts and serves until shutdown() has finished. Call after bind().
  Status serve();

  // Makes the model available; `backend` must outlive serve().
  void attach(ServingBackend* backend);

  // Graceful stop, callable from any thread (e.g. a signal watcher): new
  // generation requests get 503 and /health 503; in-flight ones may finish
  // until `drain_timeout`; the rest are aborted (their streams end with
  // finish_reason "abort"); then the listener closes and serve() returns.
  void shutdown(std::chrono::milliseconds drain_timeout);
  // Ends a shutdown's drain now: in-flight requests are aborted (e.g. on a
  // second Ctrl-C). Callable from any thread, before or during shutdown().
  void abort_in_flight();

  bool draining() const;
  // Generation requests being served right now.
  int num_active_generations() const;
  const ServerMetrics& metrics() const;

  // How long a waiting request sleeps between checks for news, a gone client
  // and shutdown.
  static constexpr std::chrono::milliseconds kPollInterval{20};

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vpod::server
