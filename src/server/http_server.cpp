#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/log.h"
#include "server/connection.h"
#include "server/generation_call.h"
#include "server/openai_json.h"
#include "server/request_parse.h"
#include "server/utf8.h"
#include "vpod/build_info.h"

namespace vpod::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// After an abort, how long a request waits for the engine to confirm it (the
// final deltas carry the metrics); one engine step is normally enough.
constexpr std::chrono::milliseconds kAbortGrace{5000};

// cpp-httplib 0.11 listens with a backlog of 5, which drops connection
// bursts (32 clients connecting at once) into SYN retries; Linux lets a
// listening socket be listened on again with a deeper backlog.
class ListeningServer : public httplib::Server {
 public:
  bool deepen_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

// "cmpl-" + 32 hex digits, unique per process run.
std::string request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_body(error), "application/json");
}

// Compares without an early exit, so the key cannot be guessed byte by byte
// from response times.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

RequestLimits limits_for(const ModelCard& card) {
  RequestLimits limits;
  limits.max_model_len = card.max_model_len;
  limits.vocab_size = card.vocab_size;
  return limits;
}

// The prompt and what may be generated must fit in --max-model-len.
std::optional<ApiError> check_context(std::size_t prompt_tokens, int max_tokens, int max_model_len,
                                      const char* what) {
  if (prompt_tokens + static_cast<std::size_t>(max_tokens) <=
      static_cast<std::size_t>(max_model_len)) {
    return std::nullopt;
  }
  return bad_request(
      fmt::format("This model's maximum context length is {} tokens. However, you "
                  "requested {} tokens ({} in the {}, {} in the completion). "
                  "Please reduce the length of the {} or completion.",
                  max_model_len, prompt_tokens + max_tokens, prompt_tokens, what, max_tokens, what),
      "max_tokens");
}

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(ServerConfig c) : config(std::move(c)) {}

  ServerConfig config;
  ListeningServer http;
  int port = -1;
  std::atomic<ServingBackend*> backend{nullptr};
  std::atomic<bool> draining{false};
  std::atomic<bool> abort_all{false};
  std::atomic<bool> serving{false};
  std::atomic<bool> stopped{false};
  std::atomic<int> active_generations{0};
  ServerMetrics metrics;

  // Counts a request as in flight (and, for generation, as active) for as
  // long as it lives; a streamed response keeps it until the stream ends.
  class Scope {
   public:
    Scope(Impl& impl, bool generation) : impl_(impl), generation_(generation) {
      ++impl_.metrics.num_http_in_flight;
      if (generation_) ++impl_.active_generations;
    }
    ~Scope() {
      --impl_.metrics.num_http_in_flight;
      if (generation_) --impl_.active_generations;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Impl& impl_;
    bool generation_;
  };

  // A streamed response's state, owned by its content provider.
  struct Stream {
    std::unique_ptr<Scope> scope;
    std::unique_ptr<GenerationCall> call;
    std::unique_ptr<ResponseBuilder> builder;
    int fd = -1;
  };

  using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&,
                                          ServingBackend&, std::unique_ptr<Scope>)>;
  enum class Access { open, key };
  enum class Kind { info, generation };

  void install_routes();
  httplib::Server::Handler route(Access access, Kind kind, RouteHandler handler);
  bool authorized(const httplib::Request& req) const;

  void completions(const httplib::Request& req, httplib::Response& res, ServingBackend& backend,
                   std::unique_ptr<Scope> scope);
  void chat_completions(const httplib::Request& req, httplib::Response& res,
                        ServingBackend& backend, std::unique_ptr<Scope> scope);
  void tokenize(const httplib::Request& req, httplib::Response& res, ServingBackend& backend);
  void detokenize(const httplib::Request& req, httplib::Response& res, ServingBackend& backend);

  // Submits the sequences and answers: a JSON body, or an SSE stream.
  void generate(const httplib::Request& req, httplib::Response& res, ServingBackend& backend,
                std::unique_ptr<Scope> scope, ResponseOptions options,
                const engine::SamplingParams& sampling, const engine::StopParams& stop,
                std::vector<std::vector<std::int32_t>> prompts,
                std::vector<std::string> echo_texts);
  // Checks between waits: shutdown aborts, and so does a client that left.
  // Returns true when the client has gone.
  bool check_abort(GenerationCall& call, int fd) const;
  // After an abort: collects the final deltas (for metrics) for a while.
  static void drain_after_abort(GenerationCall& call);
  bool pump(Stream& stream, httplib::DataSink& sink);
};

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (config.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() <= kBearer.size() || header.compare(0, kBearer.size(), kBearer) != 0) {
    return false;
  }
  return constant_time_equal(std::string_view(header).substr(kBearer.size()), config.api_key);
}

httplib::Server::Handler HttpServer::Impl::route(Access access, Kind kind, RouteHandler handler) {
  return [this, access, kind, handler = std::move(handler)](const httplib::Request& req,
                                                            httplib::Response& res) {
    auto scope = std::make_unique<Scope>(*this, kind == Kind::generation);
    try {
      if (access == Access::key && !authorized(req)) return reply_error(res, unauthorized());
      if (kind == Kind::generation && draining.load()) {
        return reply_error(res, service_unavailable("The server is shutting down"));
      }
      ServingBackend* b = backend.load();
      if (b == nullptr || !b->ready()) {
        return reply_error(res, service_unavailable("The model is still loading"));
      }
      handler(req, res, *b, std::move(scope));
    } catch (const std::exception& e) {
      VPOD_LOG_ERROR("{} {}: {}", req.method, req.path, e.what());
      reply_error(res, server_error(fmt::format("Internal error: {}", e.what())));
    }
  };
}

void HttpServer::Impl::install_routes() {
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    ServingBackend* b = backend.load();
    if (draining.load())
      return reply_error(res, service_unavailable("The server is shutting down"));
    if (b == nullptr || !b->ready()) {
      return reply_error(res, service_unavailable("The model is still loading"));
    }
    res.status = 200;
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    ServingBackend* b = backend.load();
    // Before the model is attached: the engine's metrics at zero.
    const engine::MetricsSnapshot snapshot =
        b != nullptr ? b->metrics() : engine::EngineMetrics().snapshot();
    res.set_content(render_metrics(snapshot, metrics), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    reply_json(res, 200, {{"version", build_info::version}});
  });
  http.Get("/v1/models",
           route(Access::key, Kind::info,
                 [](const httplib::Request&, httplib::Response& res, ServingBackend& b,
                    std::unique_ptr<Scope>) { reply_json(res, 200, models_response(b.model())); }));
  http.Post("/v1/completions", route(Access::key, Kind::generation,
                                     [this](const httplib::Request& req, httplib::Response& res,
                                            ServingBackend& b, std::unique_ptr<Scope> scope) {
                                       completions(req, res, b, std::move(scope));
                                     }));
  http.Post("/v1/chat/completions",
            route(Access::key, Kind::generation,
                  [this](const httplib::Request& req, httplib::Response& res, ServingBackend& b,
                         std::unique_ptr<Scope> scope) {
                    chat_completions(req, res, b, std::move(scope));
                  }));
  http.Post("/tokenize",
            route(Access::key, Kind::info,
                  [this](const httplib::Request& req, httplib::Response& res, ServingBackend& b,
                         std::unique_ptr<Scope>) { tokenize(req, res, b); }));
  http.Post("/detokenize",
            route(Access::key, Kind::info,
                  [this](const httplib::Request& req, httplib::Response& res, ServingBackend& b,
                         std::unique_ptr<Scope>) { detokenize(req, res, b); }));

  // Errors cpp-httplib produces itself (no route, body over the limit, bad
  // request line) get the OpenAI error shape too; handler-made errors
  // already have a body and are left alone.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError error;
        if (res.status == 404 || res.status == 405) {
          error = route_not_found(req.method, req.path);
        } else if (res.status == 413) {
          error = payload_too_large(config.max_body_bytes);
          res.set_header("Connection", "close");  // the unread body must not be parsed as a request
        } else {
          error = bad_request(fmt::format("Bad HTTP request ({})", res.status));
          error.http_status = res.status;
        }
        reply_error(res, error);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        VPOD_LOG_ERROR("{} {}: {}", req.method, req.path, what);
        reply_error(res, server_error("Internal error: " + what));
      });
  http.set_logger(
      [this]([[maybe_unused]] const httplib::Request& req, const httplib::Response& res) {
        metrics.count_http_response(res.status);
        VPOD_LOG_DEBUG("{} {} {} -> {}", req.remote_addr, req.method, req.path, res.status);
      });
}

void HttpServer::Impl::completions(const httplib::Request& req, httplib::Response& res,
                                   ServingBackend& backend, std::unique_ptr<Scope> scope) {
  const ModelCard& card = backend.model();
  auto parsed = parse_completion_request(req.body, limits_for(card));
  if (!parsed.ok()) return reply_error(res, parsed.error());
  CompletionRequest& r = parsed.value();
  if (!r.model.empty() && r.model != card.id) return reply_error(res, model_not_found(r.model));

  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::string> echo_texts;
  for (Prompt& p : r.prompts) {
    std::vector<std::int32_t> ids = std::move(p.token_ids);
    if (!p.is_token_ids) {
      auto tokens = backend.tokenize(p.text, r.add_special_tokens);
      if (!tokens.ok()) return reply_error(res, from_status(tokens.status(), "prompt"));
      ids = std::move(tokens).value();
      if (ids.empty()) return reply_error(res, bad_request("'prompt' has no tokens", "prompt"));
    }
    if (auto e = check_context(ids.size(), r.stop.max_tokens, card.max_model_len, "prompt")) {
      return reply_error(res, *e);
    }
    if (r.echo) {
      if (p.is_token_ids) {
        auto text = backend.detokenize(ids, r.stop.skip_special_tokens);
        if (!text.ok()) return reply_error(res, from_status(text.status(), "prompt"));
        echo_texts.push_back(std::move(text).value());
      } else {
        echo_texts.push_back(std::move(p.text));
      }
    }
    prompts.push_back(std::move(ids));
  }
  ResponseOptions options;
  options.endpoint = Endpoint::completions;
  options.id = request_id("cmpl-");
  options.n = r.output.n;
  options.stream = r.output.stream;
  options.include_usage = r.output.include_usage;
  options.return_token_ids = r.output.return_token_ids;
  generate(req, res, backend, std::move(scope), std::move(options), r.sampling, r.stop,
           std::move(prompts), std::move(echo_texts));
}

void HttpServer::Impl::chat_completions(const httplib::Request& req, httplib::Response& res,
                                        ServingBackend& backend, std::unique_ptr<Scope> scope) {
  const ModelCard& card = backend.model();
  auto parsed = parse_chat_request(req.body, limits_for(card));
  if (!parsed.ok()) return reply_error(res, parsed.error());
  ChatRequest& r = parsed.value();
  if (!r.model.empty() && r.model != card.id) return reply_error(res, model_not_found(r.model));

  auto text = backend.apply_chat_template(r.messages, r.chat_template);
  if (!text.ok()) return reply_error(res, from_status(text.status(), "messages"));
  auto tokens = backend.tokenize(text.value(), r.add_special_tokens);
  if (!tokens.ok()) return reply_error(res, from_status(tokens.status(), "messages"));
  std::vector<std::int32_t> ids = std::move(tokens).value();
  if (ids.empty()) return reply_error(res, bad_request("'messages' have no tokens", "messages"));
  // Unset max_tokens: whatever the context has room for.
  const int room = card.max_model_len - static_cast<int>(ids.size());
  r.stop.max_tokens = r.max_tokens.value_or(std::max(room, 1));
  if (auto e = check_context(ids.size(), r.stop.max_tokens, card.max_model_len, "messages")) {
    return reply_error(res, *e);
  }
  if (r.stop.min_tokens > r.stop.max_tokens) {
    return reply_error(res, bad_request(fmt::format("'min_tokens' ({}) must not exceed the {} "
                                                    "tokens left in the context",
                                                    r.stop.min_tokens, r.stop.max_tokens),
                                        "min_tokens"));
  }
  ResponseOptions options;
  options.endpoint = Endpoint::chat;
  options.id = request_id("chatcmpl-");
  options.n = r.output.n;
  options.stream = r.output.stream;
  options.include_usage = r.output.include_usage;
  options.return_token_ids = r.output.return_token_ids;
  std::vector<std::vector<std::int32_t>> prompts;
  prompts.push_back(std::move(ids));
  generate(req, res, backend, std::move(scope), std::move(options), r.sampling, r.stop,
           std::move(prompts), {});
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res,
                                ServingBackend& backend, std::unique_ptr<Scope> scope,
                                ResponseOptions options, const engine::SamplingParams& sampling,
                                const engine::StopParams& stop,
                                std::vector<std::vector<std::int32_t>> prompts,
                                std::vector<std::string> echo_texts) {
  std::vector<engine::RequestSpec> specs;
  specs.reserve(prompts.size() * options.n);
  for (const auto& prompt : prompts) {
    for (int i = 0; i < options.n; ++i) {
      engine::RequestSpec spec{prompt, sampling, stop};
      if (sampling.seed) spec.sampling.seed = choice_seed(*sampling.seed, i);
      specs.push_back(std::move(spec));
    }
  }
  auto call = GenerationCall::start(backend, std::move(specs));
  if (!call.ok()) return reply_error(res, call.error());

  options.created = static_cast<std::int64_t>(std::time(nullptr));
  options.model = backend.model().id;
  options.logprobs = sampling.logprobs.has_value();
  options.stop_token_ids = stop.stop_token_ids;
  auto builder = std::make_unique<ResponseBuilder>(
      options, [&backend](std::int32_t t) { return backend.token_bytes(t); }, std::move(prompts),
      std::move(echo_texts));
  const int fd =
      find_connection_socket({req.local_addr, req.local_port, req.remote_addr, req.remote_port});

  if (!options.stream) {
    GenerationCall& c = *call.value();
    const auto sink = [&](int i, engine::RequestOutput& d) { builder->add(i, d); };
    for (;;) {
      c.poll(sink);
      if (c.finished()) break;
      if (check_abort(c, fd)) {
        drain_after_abort(c);
        res.set_header("Connection", "close");
        return reply_error(res, bad_request("The client closed the connection"));
      }
      c.wait(HttpServer::kPollInterval);
    }
    if (builder->error()) return reply_error(res, *builder->error());
    return reply_json(res, 200, builder->response());
  }

  auto stream = std::make_shared<Stream>();
  stream->scope = std::move(scope);
  stream->call = std::move(call).value();
  stream->builder = std::move(builder);
  stream->fd = fd;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream",
                                   [this, stream](std::size_t, httplib::DataSink& sink) {
                                     try {
                                       return pump(*stream, sink);
                                     } catch (const std::exception& e) {
                                       VPOD_LOG_ERROR("stream failed: {}", e.what());
                                       return false;  // ~Stream aborts the sequences
                                     }
                                   });
}

bool HttpServer::Impl::check_abort(GenerationCall& call, int fd) const {
  if (call.aborted()) return false;
  if (abort_all.load()) {
    call.abort();
    return false;
  }
  if (peer_closed(fd)) {
    call.abort();
    return true;
  }
  return false;
}

void HttpServer::Impl::drain_after_abort(GenerationCall& call) {
  const auto deadline = Clock::now() + kAbortGrace;
  while (!call.finished() && Clock::now() < deadline) {
    call.poll([](int, engine::RequestOutput&) {});
    if (!call.finished()) call.wait(HttpServer::kPollInterval);
  }
}

// Called by cpp-httplib until it returns false or the sink is done. Every
// call writes something (an empty write would end the stream).
bool HttpServer::Impl::pump(Stream& s, httplib::DataSink& sink) {
  for (;;) {
    std::string out;
    s.call->poll([&](int i, engine::RequestOutput& d) { out += s.builder->add(i, d); });
    if (s.call->finished()) {
      out += s.builder->stream_tail();
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
    }
    if (!out.empty()) {
      if (sink.write(out.data(), out.size())) return true;
      s.call->abort();  // the client is gone
      drain_after_abort(*s.call);
      return false;
    }
    if (check_abort(*s.call, s.fd)) {
      drain_after_abort(*s.call);
      return false;
    }
    s.call->wait(HttpServer::kPollInterval);
  }
}

void HttpServer::Impl::tokenize(const httplib::Request& req, httplib::Response& res,
                                ServingBackend& backend) {
  const ModelCard& card = backend.model();
  auto parsed = parse_tokenize_request(req.body, limits_for(card));
  if (!parsed.ok()) return reply_error(res, parsed.error());
  const TokenizeRequest& r = parsed.value();
  if (!r.model.empty() && r.model != card.id) return reply_error(res, model_not_found(r.model));
  std::string text = r.prompt;
  if (r.is_chat) {
    auto rendered = backend.apply_chat_template(r.messages, r.chat_template);
    if (!rendered.ok()) return reply_error(res, from_status(rendered.status(), "messages"));
    text = std::move(rendered).value();
  }
  auto tokens = backend.tokenize(text, r.add_special_tokens);
  if (!tokens.ok()) return reply_error(res, from_status(tokens.status()));
  json token_strs = nullptr;
  if (r.return_token_strs) {
    token_strs = json::array();
    for (std::int32_t t : tokens.value())
      token_strs.push_back(to_valid_utf8(backend.token_bytes(t)));
  }
  reply_json(res, 200,
             {{"count", tokens->size()},
              {"max_model_len", card.max_model_len},
              {"tokens", tokens.value()},
              {"token_strs", std::move(token_strs)}});
}

void HttpServer::Impl::detokenize(const httplib::Request& req, httplib::Response& res,
                                  ServingBackend& backend) {
  const ModelCard& card = backend.model();
  auto parsed = parse_detokenize_request(req.body, limits_for(card));
  if (!parsed.ok()) return reply_error(res, parsed.error());
  const DetokenizeRequest& r = parsed.value();
  if (!r.model.empty() && r.model != card.id) return reply_error(res, model_not_found(r.model));
  auto text = backend.detokenize(r.tokens, /*skip_special_tokens=*/false);
  if (!text.ok()) return reply_error(res, from_status(text.status(), "tokens"));
  reply_json(res, 200, {{"prompt", text.value()}});
}

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  Impl& s = *impl_;
  const int threads = std::max(1, s.config.http_threads);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_keep_alive_max_count(static_cast<std::size_t>(s.config.keep_alive_max_requests));
  s.http.set_keep_alive_timeout(s.config.keep_alive_timeout_s);
  s.http.set_read_timeout(s.config.read_timeout_s);
  s.http.set_write_timeout(s.config.write_timeout_s);
  s.http.set_payload_max_length(s.config.max_body_bytes);
  s.http.set_tcp_nodelay(true);  // SSE chunks are small; do not wait to coalesce them
  s.install_routes();
}

HttpServer::~HttpServer() = default;

Status HttpServer::bind() {
  // cpp-httplib 0.11 sends without MSG_NOSIGNAL: a client that disconnects
  // mid-stream would otherwise kill the process with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  if (s.config.port == 0) {
    s.port = s.http.bind_to_any_port(s.config.host);
    if (s.port <= 0) s.port = -1;
  } else {
    s.port = s.http.bind_to_port(s.config.host, s.config.port) ? s.config.port : -1;
  }
  if (s.port < 0) {
    return unavailable(
        fmt::format("cannot listen on {}:{} (in use, or not an address of this "
                    "machine)",
                    s.config.host, s.config.port));
  }
  if (!s.http.deepen_backlog(s.config.listen_backlog)) {
    VPOD_LOG_WARN("could not raise the listen backlog to {}", s.config.listen_backlog);
  }
  return {};
}

int HttpServer::port() const { return impl_->port; }

Status HttpServer::serve() {
  Impl& s = *impl_;
  s.serving = true;
  if (s.stopped.load()) return {};
  if (!s.http.listen_after_bind() && !s.stopped.load()) {
    return internal_error("the HTTP listener failed");
  }
  return {};
}

void HttpServer::attach(ServingBackend* backend) { impl_->backend.store(backend); }

void HttpServer::shutdown(std::chrono::milliseconds drain_timeout) {
  Impl& s = *impl_;
  s.draining = true;
  const auto wait_idle = [&](Clock::time_point deadline, bool until_abort) {
    while (s.active_generations.load() > 0 && Clock::now() < deadline &&
           !(until_abort && s.abort_all.load())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_idle(Clock::now() + drain_timeout, /*until_abort=*/true);
  if (s.active_generations.load() > 0) {
    VPOD_LOG_INFO("drain deadline passed: aborting {} requests", s.active_generations.load());
  }
  s.abort_all = true;
  wait_idle(Clock::now() + kAbortGrace, /*until_abort=*/false);
  s.stopped = true;
  if (s.serving.load()) {
    // serve() may be between its check of `stopped` and the listener start.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    while (!s.http.is_running() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  s.http.stop();
  // Idle keep-alive connections would hold their worker threads (and so
  // serve()) until the keep-alive timeout.
  const int closed = shutdown_connections(s.port);
  if (closed > 0) VPOD_LOG_DEBUG("closed {} open connections", closed);
}

void HttpServer::abort_in_flight() { impl_->abort_all = true; }

bool HttpServer::draining() const { return impl_->draining.load(); }
int HttpServer::num_active_generations() const { return impl_->active_generations.load(); }
const ServerMetrics& HttpServer::metrics() const { return impl_->metrics; }

}  // namespace vpod::server
