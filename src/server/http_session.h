// One client connection, served asynchronously on its own strand: read a
// request (head, then body, each under its limits and deadline), answer it,
// then the next one on the same connection, in order (pipelined requests wait
// in the buffer until the one before has been answered).
//
//   idle --first byte--> head --checks--> body --> handling (worker pool)
//     ^                                               |
//     |                      reply <------------------+------> generation
//     +------ keep-alive <-- written <-- stream chunks / whole JSON <--+
//
// Decided from the head alone, before any body byte is read: 401, 404, 413
// (Content-Length over the limit), 415 (compressed bodies), 431, 503. The
// connection is then closed after the answer, lingering to read a little of
// the unread body so the client sees the answer and not a reset.
//
// A generation's tokens arrive through the engine's wake callback, which
// posts to the strand (at most one pending post per connection). While a
// request is being handled the socket stays watched: a client that resets
// the connection gets its sequences aborted. One that half-closes (sends
// FIN) may still be reading, so it is probed -- an interim "100 Continue" to
// an HTTP/1.1 client waiting for a whole answer, the next chunk for a stream
// -- and aborted only when the probe shows it gone (a reset); otherwise it
// gets its answer and the connection closes.
//
// Lifetime: shared_ptr; pending handlers hold it. The registry holds a weak
// reference.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/api_routes.h"
#include "server/connection_registry.h"
#include "server/http_limits.h"
#include "server/http_request_head.h"

namespace vpod::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// Engine wake callbacks post to sessions only while this is open; the server
// closes it before its event loop is destroyed.
struct WakeGate {
  std::mutex mutex;
  bool open = true;  // guarded by mutex
};

// What every connection of one server shares.
struct SessionContext {
  HttpLimits limits;
  ApiRoutes* routes = nullptr;
  ApiState* api = nullptr;
  net::thread_pool* workers = nullptr;
  ConnectionRegistry* registry = nullptr;
  std::shared_ptr<WakeGate> gate;
  std::atomic<int>* active_generations = nullptr;  // admitted generation requests not yet answered
  std::atomic<bool>* abort_all = nullptr;          // the drain deadline has passed
  bool log_requests = true;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, const SessionContext& context);
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // Registers with the registry and begins reading; a connection beyond
  // --max-connections (none idle to close) is answered 503 and closed.
  void start();
  // From any thread: close now (eviction, shutdown).
  void post_close();
  // From any thread: abort the generation in flight, if any (its stream ends
  // with finish_reason "abort").
  void post_abort();

 private:
  using ErrorCode = boost::system::error_code;

  // Reading a request.
  void wait_for_request(bool first);
  void read_head();
  void read_head_more();
  void on_head(ErrorCode ec, std::size_t head_bytes);
  void read_body();
  void on_body(ErrorCode ec);
  void handle();

  // Answering.
  void on_outcome(RouteOutcome outcome);
  void send_reply(Reply reply);
  void on_reply_written(ErrorCode ec);
  void reply_and_close(const ApiError& error);
  void response_done();
  void after_response();
  void linger_close();
  void linger_read(std::size_t drained);

  // Generation.
  std::function<void()> make_notify();
  void wake_from_engine(std::shared_ptr<HttpSession> self);
  void start_generation(Generation generation);
  void pump();
  void flush_stream();
  void on_stream_written(ErrorCode ec);
  void finish_generation();
  void client_gone();

  // Watching the client while its request is handled.
  void watch_peer();
  void on_peer_read(ErrorCode ec, std::size_t n);
  void check_peer();
  bool peer_reset() const;

  void arm_deadline(std::chrono::milliseconds timeout);
  void close();
  void log_access() const;

  tcp::socket socket_;
  SessionContext ctx_;
  boost::beast::flat_buffer buffer_;  // received, not yet parsed (pipelined bytes wait here)
  net::steady_timer deadline_;        // the current read or write must finish by then
  net::steady_timer peer_timer_;      // checks a half-closed client for a reset
  ConnectionRegistry::Entry entry_{};
  bool registered_ = false;
  bool closed_ = false;
  std::size_t head_scanned_ = 0;  // bytes of buffer_ searched for the head's end

  // The request being served.
  std::optional<RequestParser> parser_;
  Route route_ = Route::not_found;
  RequestHead head_;          // method and path "-" until a head has been parsed
  bool close_after_ = false;  // close once this response is written
  std::string request_id_;
  std::chrono::steady_clock::time_point started_;
  int status_ = 0;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  bool in_flight_ = false;   // counted in num_http_in_flight
  bool generation_ = false;  // counted in active_generations

  // The client's side.
  bool watching_ = false;  // a read is pending to notice a reset or FIN
  bool resume_after_watch_ =
      false;               // the response is done: read the next request once the watch returns
  bool peer_eof_ = false;  // FIN received: no more requests on this connection
  bool probe_sent_ = false;
  bool gone_ = false;  // the client cannot receive the answer

  // A generation in flight.
  std::optional<Generation> gen_;
  std::atomic<bool> wake_pending_{false};
  std::string stream_head_;  // status line and headers, sent with the first chunk
  std::string stream_out_;   // SSE events not yet written
  std::string write_buf_;    // the write in flight
  bool writing_ = false;
  bool stream_complete_ = false;      // the tail ([DONE]) is in stream_out_ or written
  bool final_write_started_ = false;  // the write carrying the tail is in flight
  std::string scratch_;               // lingering close: what is read and dropped
};

}  // namespace vpod::server
