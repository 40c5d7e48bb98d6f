// HttpServer (http_server.h): the listener, the event-loop threads, the
// worker pool, drain and shutdown, and the periodic stats line.
#include "server/http_server.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "server/api_routes.h"
#include "server/connection_registry.h"
#include "server/http_session.h"
#include "server/stats_log.h"

namespace vpod::server {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// After the drain deadline's abort, how long in-flight requests get to end.
constexpr auto kAbortGrace = 5s;
// Descriptors kept free beside the connections (model files, logs, pipes).
constexpr rlim_t kReservedFds = 64;
// After accept() fails for lack of descriptors: wait before trying again.
constexpr auto kAcceptRetry = 50ms;

// Raises the open-files limit to what the system allows: a Debian default of
// 1024 would cap connections far below --max-connections. Returns the limit.
rlim_t raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return raised.rlim_cur;
  }
  return r.rlim_cur;
}

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(ServerConfig c)
      : config(std::move(c)),
        workers(static_cast<std::size_t>(config.http_workers > 0
                                             ? config.http_workers
                                             : std::max(2u, std::thread::hardware_concurrency()))),
        registry(static_cast<std::size_t>(std::max(1, config.limits.max_connections)),
                 &api.metrics),
        routes(api) {
    api.api_key = config.api_key;
    api.responses.set_limits(config.responses_store);
    io.emplace();
    work.emplace(io->get_executor());
    acceptor.emplace(*io);
    stats_timer.emplace(*io);
  }

  void accept();
  // Ends the event loop for good: no engine callback posts any more, work
  // on the pool finishes, and the handlers still queued are destroyed with
  // the loop (and the connections they hold, aborting their sequences) while
  // the backend is still alive. Idempotent.
  void release_loop();
  void on_accept(boost::system::error_code ec, tcp::socket socket);
  void schedule_stats();

  // Declared in dependency order: sessions (owned by the loop's handlers)
  // use everything above the loop.
  ServerConfig config;
  net::thread_pool workers;
  ApiState api;
  ConnectionRegistry registry;
  ApiRoutes routes;
  // Guards the loop's lifetime: serve() (release_loop) destroys it while
  // shutdown() and abort_in_flight() post to it from other threads.
  std::mutex loop_mutex;
  std::optional<net::io_context> io;
  // Keeps run() going until shutdown() stops the loop, even when no
  // connection or timer is pending.
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> stats_timer;
  std::optional<engine::MetricsSnapshot> last_stats;
  Clock::time_point last_stats_time;
  std::shared_ptr<WakeGate> gate = std::make_shared<WakeGate>();
  std::atomic<int> active_generations{0};
  std::atomic<bool> abort_all{false};
  std::atomic<bool> stopped{false};
  SessionContext context;
  int port = -1;
};

void HttpServer::Impl::release_loop() {
  {
    std::lock_guard lock(gate->mutex);
    gate->open = false;
  }
  std::lock_guard lock(loop_mutex);
  if (!io) return;
  io->stop();
  workers.join();
  stats_timer.reset();
  acceptor.reset();
  work.reset();
  io.reset();
}

void HttpServer::Impl::accept() {
  acceptor->async_accept(net::make_strand(*io),
                         [this](boost::system::error_code ec, tcp::socket socket) {
                           on_accept(ec, std::move(socket));
                         });
}

void HttpServer::Impl::on_accept(boost::system::error_code ec, tcp::socket socket) {
  if (stopped.load() || !acceptor->is_open()) return;
  if (ec) {
    // Out of descriptors (EMFILE) or a connection reset before accept: try
    // again shortly rather than spin.
    VPOD_LOG_WARN("accept failed: {}", ec.message());
    auto retry = std::make_shared<net::steady_timer>(*io, kAcceptRetry);
    retry->async_wait([this, retry](boost::system::error_code) { accept(); });
    return;
  }
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks are small: send at once
  std::make_shared<HttpSession>(std::move(socket), context)->start();
  accept();
}

void HttpServer::Impl::schedule_stats() {
  if (config.stats_interval.count() <= 0) return;
  stats_timer->expires_after(config.stats_interval);
  stats_timer->async_wait([this](boost::system::error_code ec) {
    if (ec || stopped.load()) return;
    if (ServingBackend* b = api.backend.load()) {
      engine::MetricsSnapshot now = b->metrics();
      const Clock::time_point t = Clock::now();
      if (last_stats) {
        const double seconds = std::chrono::duration<double>(t - last_stats_time).count();
        if (auto line = stats_line(*last_stats, now, seconds)) VPOD_LOG_INFO("{}", *line);
      }
      last_stats = std::move(now);
      last_stats_time = t;
    }
    schedule_stats();
  });
}

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  Impl& s = *impl_;
  s.context.limits = s.config.limits;
  s.context.routes = &s.routes;
  s.context.api = &s.api;
  s.context.workers = &s.workers;
  s.context.registry = &s.registry;
  s.context.gate = s.gate;
  s.context.active_generations = &s.active_generations;
  s.context.abort_all = &s.abort_all;
  s.context.log_requests = s.config.log_requests;
}

HttpServer::~HttpServer() {
  impl_->stopped = true;
  impl_->release_loop();
}

Status HttpServer::bind() {
  // A client that disconnects mid-write must cost an error code, not the
  // process (Asio sends with MSG_NOSIGNAL, but other writers may not).
  ::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  const rlim_t fds = raise_fd_limit();
  if (static_cast<rlim_t>(s.config.limits.max_connections) + kReservedFds > fds) {
    const int fit = fds > kReservedFds ? static_cast<int>(fds - kReservedFds) : 1;
    VPOD_LOG_WARN("--max-connections {} exceeds the open-files limit {}: using {}",
                  s.config.limits.max_connections, fds, fit);
    s.config.limits.max_connections = fit;
    s.context.limits.max_connections = fit;
  }
  boost::system::error_code ec;
  const auto address = net::ip::make_address(s.config.host, ec);
  if (ec) return invalid_argument(fmt::format("--host {}: not an IP address", s.config.host));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.config.port));
  s.acceptor->open(endpoint.protocol(), ec);
  // SO_REUSEADDR (not SO_REUSEPORT): a restart may bind over TIME_WAIT
  // connections, but never a port another process listens on.
  if (!ec) s.acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(s.config.listen_backlog, ec);
  if (ec) {
    boost::system::error_code ignored;
    s.acceptor->close(ignored);
    const std::string why = ec == net::error::address_in_use ? "the port is in use" : ec.message();
    return unavailable(
        fmt::format("cannot listen on {}:{}: {}", s.config.host, s.config.port, why));
  }
  s.port = s.acceptor->local_endpoint().port();
  return {};
}

int HttpServer::port() const { return impl_->port; }

Status HttpServer::serve() {
  Impl& s = *impl_;
  if (!s.io || !s.acceptor->is_open()) {
    return failed_precondition("serve() before a successful bind()");
  }
  if (!s.stopped.load()) {
    net::post(*s.io, [&s] {
      s.accept();
      s.schedule_stats();
    });
    std::vector<std::thread> extra;
    for (int i = 1; i < std::max(1, s.config.io_threads); ++i) {
      extra.emplace_back([&s] { s.io->run(); });
    }
    s.io->run();
    for (std::thread& t : extra) t.join();
  }
  s.release_loop();
  return {};
}

void HttpServer::attach(ServingBackend* backend) { impl_->api.backend.store(backend); }

void HttpServer::shutdown(std::chrono::milliseconds drain_timeout) {
  Impl& s = *impl_;
  s.api.draining = true;
  const auto wait_idle = [&](Clock::time_point deadline, bool until_abort) {
    while (s.active_generations.load() > 0 && Clock::now() < deadline &&
           !(until_abort && s.abort_all.load())) {
      std::this_thread::sleep_for(10ms);
    }
  };
  wait_idle(Clock::now() + drain_timeout, /*until_abort=*/true);
  if (s.active_generations.load() > 0) {
    VPOD_LOG_INFO("drain deadline passed: aborting {} requests", s.active_generations.load());
  }
  abort_in_flight();
  wait_idle(Clock::now() + kAbortGrace, /*until_abort=*/false);

  // Stop accepting, close every connection, and let the loop wind down.
  s.stopped = true;
  {
    std::lock_guard lock(s.loop_mutex);
    if (!s.io) return;  // serve() has already released the loop
    net::post(*s.io, [&s] {
      boost::system::error_code ignored;
      s.acceptor->close(ignored);
      s.stats_timer->cancel();
    });
    s.registry.for_each([](HttpSession& session) { session.post_close(); });
  }
  const auto deadline = Clock::now() + 2s;
  while (s.registry.size() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  // serve() returns and releases the loop (release_loop()).
  std::lock_guard lock(s.loop_mutex);
  if (s.io) s.io->stop();
}

void HttpServer::abort_in_flight() {
  Impl& s = *impl_;
  s.abort_all = true;
  std::lock_guard lock(s.loop_mutex);
  if (s.io) s.registry.for_each([](HttpSession& session) { session.post_abort(); });
}

bool HttpServer::draining() const { return impl_->api.draining.load(); }
int HttpServer::num_active_generations() const { return impl_->active_generations.load(); }
const ServerMetrics& HttpServer::metrics() const { return impl_->api.metrics; }

}  // namespace vpod::server
