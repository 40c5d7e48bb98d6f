// The OpenAI-compatible HTTP server on Boost.Beast and Asio.
//
// Routes (api_routes.h): GET /v1/models, POST /v1/completions,
// POST /v1/chat/completions, POST /tokenize, POST /detokenize, GET /health,
// GET /metrics, GET /version. With an API key, every route but /health,
// /metrics and /version needs `Authorization: Bearer <key>`.
//
// Concurrency: connections are asynchronous (http_session.h), served by a
// few event-loop threads, so thousands of open or slow connections cost
// memory, not threads. Work that may take a while (parsing a body,
// tokenizing, rendering a chat template) runs on a separate worker pool, so
// /health and streams keep flowing while it does. A generation's tokens
// reach its connection through the engine's wake callback: no thread waits.
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
#include "server/http_limits.h"
#include "server/metrics.h"
#include "server/response_store.h"

namespace vpod::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (see HttpServer::port())
  std::string api_key;  // "": no authentication
  HttpLimits limits;
  int io_threads = 2;    // event-loop threads (sockets, SSE formatting)
  int http_workers = 0;  // threads for request bodies, tokenizing, templates; 0: the cores
  // One access-log line per request at info level (--disable-log-requests).
  bool log_requests = true;
  // While busy, a stats line (running, waiting, KV use, token rates) this often.
  std::chrono::milliseconds stats_interval{10'000};
  // Finished /v1/responses kept for previous_response_id (oldest evicted first).
  ResponseStoreLimits responses_store;
  // Pending connections the kernel queues before accept (bursts of clients).
  int listen_backlog = 1024;
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket: a clear error when the port is taken (no
  // SO_REUSEPORT, so a second server cannot share it).
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

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vpod::server
