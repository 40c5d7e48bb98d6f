// HttpSession (http_session.h): one connection's state machine - head, body,
// worker pool, reply or generation stream, keep-alive - on its strand.
#include "server/http_session.h"

#include <fmt/format.h>
#include <poll.h>

#include <boost/beast/http/read.hpp>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include "common/log.h"
#include "server/gzip.h"
#include "server/http_request_head.h"

namespace vpod::server {
namespace {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A whole reply this large or larger is gzipped for a client that takes it.
constexpr std::size_t kGzipMinBytes = 1024;
// After an answer that leaves a body unread: how long, and how much, is read
// and dropped before closing, so the client's unread data does not turn the
// close into a reset that destroys the answer in flight.
constexpr auto kLingerTime = 2s;
constexpr std::size_t kLingerBytes = std::size_t{64} << 20;
// A half-closed client waiting for its answer is checked this often for a reset.
constexpr auto kPeerCheckInterval = 20ms;
// After an abort, how long the engine gets to confirm it (its final deltas
// carry the metrics); one engine step is normally enough.
constexpr auto kAbortGrace = 5s;
// An HTTP/1.1 interim response: legal before any final one (RFC 9110 15.2),
// ignored by clients, and answered with a reset by a closed socket.
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

std::string generated_request_id() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return fmt::format("req-{:016x}{:016x}", rng(), rng());
}

// The Date header's value (RFC 9110 5.6.7), formatted once a second per thread.
std::string_view http_date() {
  thread_local std::time_t formatted = -1;
  thread_local char text[40];
  const std::time_t now = std::time(nullptr);
  if (now != formatted) {
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &utc);
    formatted = now;
  }
  return text;
}

// The status line and headers of a response.
std::string response_head(int status, unsigned version,
                          const std::vector<std::pair<std::string, std::string>>& headers) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  std::string head =
      fmt::format("HTTP/{}.{} {} {}\r\nDate: {}\r\n", version / 10, version % 10, status,
                  std::string_view(reason.data(), reason.size()), http_date());
  for (const auto& [name, value] : headers) {
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  head += "\r\n";
  return head;
}

// "HTTP/1.1 503 ...": for a connection refused before it is served.
std::string refusal(const ApiError& error) {
  const std::string body = error_body(error);
  return response_head(error.http_status, 11,
                       {{"Content-Type", "application/json"},
                        {"Content-Length", std::to_string(body.size())},
                        {"Connection", "close"}}) +
         body;
}

}  // namespace

HttpSession::HttpSession(tcp::socket socket, const SessionContext& context)
    : socket_(std::move(socket)),
      ctx_(context),
      buffer_(ctx_.limits.max_header_bytes),
      deadline_(socket_.get_executor()),
      peer_timer_(socket_.get_executor()) {}

HttpSession::~HttpSession() {
  gen_.reset();  // aborts unfinished sequences
  if (in_flight_) --ctx_.api->metrics.num_http_in_flight;
  if (generation_) --*ctx_.active_generations;
  if (registered_) ctx_.registry->remove(entry_);
}

void HttpSession::start() {
  if (!ctx_.registry->add(shared_from_this(), entry_)) {
    // Every connection is busy: refuse this one, briefly, without reading it.
    write_buf_ = refusal(service_unavailable("The server has too many open connections"));
    auto self = shared_from_this();
    net::async_write(socket_, net::buffer(write_buf_),
                     net::bind_executor(socket_.get_executor(),
                                        [self](ErrorCode, std::size_t) { self->linger_close(); }));
    arm_deadline(ctx_.limits.write_timeout);
    return;
  }
  registered_ = true;
  net::dispatch(socket_.get_executor(),
                [self = shared_from_this()] { self->wait_for_request(/*first=*/true); });
}

void HttpSession::post_close() {
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void HttpSession::post_abort() {
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->gen_ && !self->gen_->call->aborted()) self->gen_->call->abort();
  });
}

void HttpSession::arm_deadline(std::chrono::milliseconds timeout) {
  deadline_.expires_after(timeout);
  deadline_.async_wait([self = shared_from_this()](ErrorCode ec) {
    // A deadline that passes closes the socket: the pending read or write
    // fails and its handler ends the connection.
    if (!ec) self->close();
  });
}

void HttpSession::close() {
  // Timers hold the session: cancelled even when already closed (a client
  // gone mid-generation keeps a grace timer until its abort is confirmed).
  if (!gen_) deadline_.cancel();
  peer_timer_.cancel();
  if (closed_) return;
  closed_ = true;
  ErrorCode ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (gen_) client_gone();
}

// ---------------------------------------------------------------- reading

void HttpSession::wait_for_request(bool first) {
  if (closed_) return;
  if (buffer_.size() > 0) return read_head();  // a pipelined request is here already
  if (peer_eof_) return close();
  // Only a kept-alive connection may be closed to make room: a new one has
  // not had its first request read yet.
  if (registered_ && !first) ctx_.registry->set_idle(entry_, true);
  // A new connection must start its request soon; a kept-alive one may idle.
  arm_deadline(first ? ctx_.limits.header_timeout : ctx_.limits.keep_alive_timeout);
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](ErrorCode ec) {
    if (self->registered_) self->ctx_.registry->set_idle(self->entry_, false);
    if (ec || self->closed_) return self->close();
    self->read_head();
  });
}

void HttpSession::read_head() {
  arm_deadline(ctx_.limits.header_timeout);
  head_scanned_ = 0;
  read_head_more();
}

// Reads until the blank line that ends the head, into buffer_ (its max_size
// is the head limit). Each pass scans only what is new.
void HttpSession::read_head_more() {
  const std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  constexpr std::string_view kEnd = "\r\n\r\n";
  const std::size_t from = head_scanned_ >= kEnd.size() ? head_scanned_ - (kEnd.size() - 1) : 0;
  const std::size_t end = data.find(kEnd, from);
  if (end != std::string_view::npos) return on_head({}, end + kEnd.size());
  head_scanned_ = data.size();
  if (buffer_.size() >= buffer_.max_size()) return on_head(net::error::not_found, 0);
  const std::size_t room = std::min<std::size_t>(16384, buffer_.max_size() - buffer_.size());
  socket_.async_read_some(buffer_.prepare(room),
                          [self = shared_from_this()](ErrorCode ec, std::size_t n) {
                            if (ec) return self->on_head(ec, 0);
                            self->buffer_.commit(n);
                            self->read_head_more();
                          });
}

void HttpSession::on_head(ErrorCode ec, std::size_t head_bytes) {
  deadline_.cancel();
  if (closed_) return;
  if (ec == net::error::not_found) {  // the buffer (max_header_bytes) filled without an end
    return reply_and_close(http_error(
        431,
        fmt::format("The request line and headers exceed {} bytes", ctx_.limits.max_header_bytes),
        "request_header_fields_too_large"));
  }
  if (ec) return close();  // timeout, reset, or EOF between requests
  started_ = Clock::now();
  status_ = 0;
  prompt_tokens_ = completion_tokens_ = 0;
  head_ = RequestHead{};
  head_.method = head_.path = "-";
  request_id_.clear();
  close_after_ = false;
  probe_sent_ = false;
  in_flight_ = true;
  ++ctx_.api->metrics.num_http_in_flight;

  parser_.emplace();
  auto parsed = parse_request_head(
      std::string_view(static_cast<const char*>(buffer_.data().data()), head_bytes), ctx_.limits,
      *parser_);
  buffer_.consume(head_bytes);
  if (!parsed.ok()) return reply_and_close(parsed.error());
  head_ = std::move(parsed).value();
  request_id_ = head_.client_request_id;

  route_ = match_route(head_.method, head_.path);
  if (route_ == Route::not_found || route_ == Route::method_not_allowed) {
    return reply_and_close(route_not_found(head_.method, head_.path));
  }
  if (auto refused = ctx_.routes->admit(route_, head_.authorization)) {
    close_after_ = head_.has_body;  // the body stays unread
    return send_reply(std::move(*refused));
  }
  if (route_ == Route::completions || route_ == Route::chat_completions ||
      route_ == Route::responses) {
    generation_ = true;
    ++*ctx_.active_generations;
  }
  if (!route_has_body(route_)) {
    close_after_ = head_.has_body;
    return send_reply(ctx_.routes->info(route_, head_.path));
  }
  if (!head_.has_body) return handle();
  if (head_.expects_continue) {
    // The client waits for this before sending the body.
    write_buf_ = std::string(kContinue);
    arm_deadline(ctx_.limits.write_timeout);
    return net::async_write(socket_, net::buffer(write_buf_),
                            [self = shared_from_this()](ErrorCode ec, std::size_t) {
                              if (ec) return self->close();
                              self->read_body();
                            });
  }
  read_body();
}

void HttpSession::read_body() {
  arm_deadline(ctx_.limits.body_timeout);
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](ErrorCode ec, std::size_t) { self->on_body(ec); });
}

void HttpSession::on_body(ErrorCode ec) {
  deadline_.cancel();
  if (closed_) return;
  if (ec == http::error::body_limit) {
    return reply_and_close(payload_too_large(ctx_.limits.max_body_bytes));
  }
  if (ec == http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::connection_reset || ec == net::error::operation_aborted) {
    return close();
  }
  if (ec) {
    return reply_and_close(
        http_error(400, fmt::format("Bad HTTP request body: {}", ec.message()), "bad_request"));
  }
  handle();
}

void HttpSession::handle() {
  watch_peer();
  // The route may take a while (parsing, tokenizing, a chat template): it
  // runs on the worker pool and posts its outcome back to this strand.
  net::post(*ctx_.workers, [self = shared_from_this(), route = route_,
                            body = std::move(parser_->get().body())] {
    RouteOutcome outcome = self->ctx_.routes->handle(route, body, self->make_notify());
    net::post(self->socket_.get_executor(), [self, outcome = std::move(outcome)]() mutable {
      self->on_outcome(std::move(outcome));
    });
  });
  parser_.reset();
}

// ---------------------------------------------------------------- answering

void HttpSession::on_outcome(RouteOutcome outcome) {
  if (request_id_.empty()) request_id_ = std::move(outcome.request_id);
  if (auto* reply = std::get_if<Reply>(&outcome.result)) {
    if (closed_ || gone_) return response_done();
    return send_reply(std::move(*reply));
  }
  start_generation(std::move(std::get<Generation>(outcome.result)));
}

void HttpSession::send_reply(Reply reply) {
  if (closed_) return response_done();
  status_ = reply.status;
  if (request_id_.empty()) request_id_ = generated_request_id();
  close_after_ = close_after_ || !head_.keep_alive || peer_eof_;
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(reply.headers.size() + 6);
  headers.emplace_back("Content-Type", reply.content_type);
  if (head_.accepts_gzip && reply.body.size() >= kGzipMinBytes) {
    if (auto packed = gzip_compress(reply.body)) {
      reply.body = std::move(*packed);
      headers.emplace_back("Content-Encoding", "gzip");
      headers.emplace_back("Vary", "Accept-Encoding");
    }
  }
  headers.emplace_back("Content-Length", std::to_string(reply.body.size()));
  headers.emplace_back("X-Request-Id", request_id_);
  if (close_after_) {
    headers.emplace_back("Connection", "close");
  } else if (head_.version < 11) {
    headers.emplace_back("Connection", "keep-alive");
  }
  for (auto& h : reply.headers) headers.push_back(std::move(h));
  write_buf_ = response_head(reply.status, head_.version < 11 ? 10 : 11, headers);
  if (!head_.head_only) write_buf_ += reply.body;
  writing_ = true;
  arm_deadline(ctx_.limits.write_timeout);
  net::async_write(
      socket_, net::buffer(write_buf_),
      [self = shared_from_this()](ErrorCode ec, std::size_t) { self->on_reply_written(ec); });
}

void HttpSession::on_reply_written(ErrorCode ec) {
  writing_ = false;
  deadline_.cancel();
  if (ec) {
    close_after_ = true;
    gone_ = true;
  }
  response_done();
}

void HttpSession::reply_and_close(const ApiError& error) {
  close_after_ = true;
  send_reply(error_reply(error));
}

void HttpSession::response_done() {
  if (gen_) finish_generation();
  if (generation_) {
    generation_ = false;
    --*ctx_.active_generations;
  }
  if (in_flight_) {
    in_flight_ = false;
    --ctx_.api->metrics.num_http_in_flight;
    if (status_ != 0) ctx_.api->metrics.count_http_response(status_);
    log_access();
  }
  peer_timer_.cancel();
  parser_.reset();
  if (closed_) return close();  // releases the timers
  if (watching_) {
    // The watch read owns the socket's read side: the next step (the next
    // request, or the lingering close) waits until it returns, cancelled now
    // or with bytes of the next request.
    resume_after_watch_ = true;
    ErrorCode ignored;
    socket_.cancel(ignored);
    return;
  }
  after_response();
}

void HttpSession::after_response() {
  if (close_after_ || gone_) return linger_close();
  wait_for_request(/*first=*/false);
}

void HttpSession::linger_close() {
  if (closed_) return;
  ErrorCode ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  if (peer_eof_ || gone_) return close();
  // Read and drop what the client still sends, until it closes, for a bounded
  // time and size.
  arm_deadline(std::chrono::duration_cast<std::chrono::milliseconds>(kLingerTime));
  linger_read(0);
}

void HttpSession::linger_read(std::size_t drained) {
  scratch_.resize(16384);
  socket_.async_read_some(net::buffer(scratch_),
                          [self = shared_from_this(), drained](ErrorCode ec, std::size_t n) {
                            if (ec || self->closed_ || drained + n > kLingerBytes) {
                              return self->close();
                            }
                            self->linger_read(drained + n);
                          });
}

void HttpSession::log_access() const {
  if (!ctx_.log_requests) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
  VPOD_LOG_INFO("{} {} HTTP/{}.{} {} {:.1f}ms id={} prompt_tokens={} completion_tokens={}",
                head_.method, head_.path, head_.version / 10, head_.version % 10,
                status_ == 0 ? 499 : status_, ms, request_id_, prompt_tokens_, completion_tokens_);
}

// ---------------------------------------------------------------- generation

std::function<void()> HttpSession::make_notify() {
  return [gate = ctx_.gate, weak = weak_from_this()] {
    std::lock_guard lock(gate->mutex);
    if (!gate->open) return;
    if (auto self = weak.lock()) self->wake_from_engine(std::move(self));
  };
}

void HttpSession::wake_from_engine(std::shared_ptr<HttpSession> self) {
  // One post at a time: a pending one will see these deltas too. (Dropping
  // `self` here never releases the last reference: the pending post holds one
  // until after it clears the flag.)
  if (wake_pending_.exchange(true)) return;
  net::post(socket_.get_executor(), [self = std::move(self)] {
    self->wake_pending_.store(false);
    self->pump();
  });
}

void HttpSession::start_generation(Generation generation) {
  gen_.emplace(std::move(generation));
  if (gone_ || closed_) return client_gone();
  if (ctx_.abort_all->load()) gen_->call->abort();  // past the drain deadline
  if (gen_->stream) {
    status_ = 200;
    std::vector<std::pair<std::string, std::string>> headers = {
        {"Content-Type", "text/event-stream"},
        {"Cache-Control", "no-cache"},
        {"X-Request-Id", request_id_},
    };
    if (head_.version >= 11) {
      headers.emplace_back("Transfer-Encoding", "chunked");
      if (!head_.keep_alive || peer_eof_) headers.emplace_back("Connection", "close");
    } else {
      close_after_ = true;  // HTTP/1.0: the stream ends when the connection does
      headers.emplace_back("Connection", "close");
    }
    stream_head_ = response_head(200, head_.version < 11 ? 10 : 11, headers);
  }
  pump();
  if (gen_ && gen_->stream) flush_stream();  // the head goes out now
}

void HttpSession::pump() {
  if (!gen_) return;
  Generation& g = *gen_;
  g.call->poll([&](int i, engine::RequestOutput& d) {
    std::string events = g.builder->add(i, d);
    if (g.stream && !gone_) stream_out_ += events;
  });
  const bool finished = g.call->finished();
  if (gone_ || closed_) {
    if (finished) response_done();
    return;
  }
  if (g.stream) {
    if (finished && !stream_complete_) {
      stream_out_ += g.builder->stream_tail();
      stream_complete_ = true;
    }
    if (stream_out_.size() > ctx_.limits.max_stream_buffer_bytes) {
      VPOD_LOG_WARN("{}: the client reads slower than tokens arrive ({} bytes waiting); aborting",
                    request_id_, stream_out_.size());
      close_after_ = true;
      return client_gone();
    }
    return flush_stream();
  }
  if (!finished || writing_) return;  // a probe in flight calls pump() when written
  prompt_tokens_ = g.builder->prompt_tokens();
  completion_tokens_ = g.builder->completion_tokens();
  Reply reply = g.builder->error()
                    ? error_reply(*g.builder->error())
                    : Reply{200, "application/json", dump_json(g.builder->response()), {}};
  gen_.reset();
  send_reply(std::move(reply));
}

void HttpSession::flush_stream() {
  if (writing_ || closed_ || !gen_ || final_write_started_) return;
  const bool chunked = head_.version >= 11;
  write_buf_.clear();
  write_buf_.swap(stream_head_);
  if (!stream_out_.empty()) {
    if (chunked) write_buf_ += fmt::format("{:x}\r\n", stream_out_.size());
    write_buf_ += stream_out_;
    if (chunked) write_buf_ += "\r\n";
    stream_out_.clear();
  }
  const bool last = stream_complete_;
  if (last && chunked) write_buf_ += "0\r\n\r\n";
  if (write_buf_.empty()) return;
  final_write_started_ = last;
  writing_ = true;
  arm_deadline(ctx_.limits.write_timeout);
  net::async_write(socket_, net::buffer(write_buf_),
                   [self = shared_from_this(), last](ErrorCode ec, std::size_t) {
                     self->writing_ = false;
                     self->deadline_.cancel();
                     if (ec) return self->client_gone();
                     if (last) return self->response_done();
                     self->flush_stream();
                   });
}

void HttpSession::finish_generation() {
  if (!gen_) return;
  prompt_tokens_ = gen_->builder->prompt_tokens();
  completion_tokens_ = gen_->builder->completion_tokens();
  gen_.reset();
  stream_head_.clear();
  stream_out_.clear();
  stream_complete_ = false;
  final_write_started_ = false;
}

void HttpSession::client_gone() {
  gone_ = true;
  close_after_ = true;
  if (!gen_) return;
  if (!gen_->call->aborted()) gen_->call->abort();
  if (gen_->call->finished()) return response_done();
  // The engine confirms the abort within a step or so (pump() then ends the
  // request); past the grace period the request ends without it.
  deadline_.expires_after(kAbortGrace);
  deadline_.async_wait([self = shared_from_this()](ErrorCode ec) {
    if (!ec && self->gen_) self->response_done();
  });
  if (!closed_) {
    closed_ = true;
    ErrorCode ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
}

// ---------------------------------------------------------------- the peer

void HttpSession::watch_peer() {
  if (watching_ || peer_eof_ || closed_ || buffer_.size() >= buffer_.max_size()) return;
  watching_ = true;
  const std::size_t room = std::min<std::size_t>(4096, buffer_.max_size() - buffer_.size());
  socket_.async_read_some(
      buffer_.prepare(room),
      [self = shared_from_this()](ErrorCode ec, std::size_t n) { self->on_peer_read(ec, n); });
}

void HttpSession::on_peer_read(ErrorCode ec, std::size_t n) {
  watching_ = false;
  if (!ec) buffer_.commit(n);  // the next, pipelined request's bytes
  const bool resume = resume_after_watch_;
  resume_after_watch_ = false;
  if (ec == net::error::eof) {
    peer_eof_ = true;
  } else if (ec && ec != net::error::operation_aborted) {
    if (resume) return close();
    return client_gone();
  }
  if (closed_) return;
  if (resume) return after_response();
  if (peer_eof_) return check_peer();
  if (in_flight_) watch_peer();
}

void HttpSession::check_peer() {
  if (closed_ || !in_flight_) return;
  if (peer_reset()) return client_gone();
  // A half-closed client may be waiting for its answer: probe it once.
  if (gen_ && !gen_->stream && !probe_sent_ && !writing_ && head_.version >= 11) {
    probe_sent_ = true;
    write_buf_ = std::string(kContinue);
    writing_ = true;
    net::async_write(socket_, net::buffer(write_buf_),
                     [self = shared_from_this()](ErrorCode ec, std::size_t) {
                       self->writing_ = false;
                       if (ec) return self->client_gone();
                       self->pump();  // the generation may have finished meanwhile
                     });
  }
  peer_timer_.expires_after(kPeerCheckInterval);
  peer_timer_.async_wait([self = shared_from_this()](ErrorCode ec) {
    if (!ec) self->check_peer();
  });
}

bool HttpSession::peer_reset() const {
  pollfd p{const_cast<tcp::socket&>(socket_).native_handle(), 0, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace vpod::server
