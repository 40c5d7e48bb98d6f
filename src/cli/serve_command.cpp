// `vpod serve MODEL_DIR` (or --model DIR): the OpenAI-compatible HTTP server (src/server)
// over the engine. The listener comes up first (GET /health answers 503
// while the model loads), then the model, the KV cache and the engine.
// SIGINT/SIGTERM stop it gracefully: new requests get 503, in-flight ones may
// finish until --drain-timeout, the rest are aborted, and the process exits 0.
// A second signal aborts in-flight requests at once.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/stack_flags.h"
#include "common/log.h"
#include "model/model_config.h"
#include "server/engine_backend.h"
#include "server/http_server.h"

namespace vpod::cli {
namespace {

struct ServeArgs {
  server::EngineBackendOptions engine;
  server::ServerConfig http;
  std::string model;             // --model
  std::string model_positional;  // vpod serve MODEL (as `vllm serve MODEL`)
  std::string max_request_body = "32MiB";
  std::string max_header_bytes = "32KiB";
  std::string max_stream_buffer = "4MiB";
  std::string max_template_memory = "1GiB";
  double header_timeout_s = 10.0;
  double body_timeout_s = 30.0;
  double keep_alive_timeout_s = 30.0;
  double write_timeout_s = 30.0;
  bool disable_log_requests = false;
  bool disable_log_stats = false;
  double drain_timeout_s = 30.0;
};

[[noreturn]] void fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "vpod serve: %s\n", message.c_str());
  throw CLI::RuntimeError(code);
}

// Waits for SIGINT/SIGTERM on its own thread (they are blocked everywhere
// else, so no other thread is interrupted). The first asks for a graceful
// stop; the next ones abort in-flight requests.
class SignalWatcher {
 public:
  explicit SignalWatcher(server::HttpServer& server) : server_(server) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    thread_ = std::thread([this] { run(); });
  }
  ~SignalWatcher() {
    done_ = true;
    thread_.join();
  }
  // Blocks the signals in the calling thread and every thread it starts
  // later. Call first thing, before any thread exists.
  static void block_in_all_threads() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  }
  void wait_for_stop() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return stop_requested_; });
  }
  // Also a stop request (used when loading fails).
  void request_stop() {
    {
      std::lock_guard lock(mutex_);
      stop_requested_ = true;
    }
    cv_.notify_all();
  }

 private:
  void run() {
    const timespec poll{0, 200'000'000};
    int count = 0;
    while (!done_) {
      const int sig = sigtimedwait(&signals_, nullptr, &poll);
      if (sig < 0) continue;  // timeout or EINTR: check done_
      if (++count == 1) {
        VPOD_LOG_INFO("{}: draining (again to abort in-flight requests)", strsignal(sig));
        request_stop();
      } else {
        VPOD_LOG_INFO("{}: aborting in-flight requests", strsignal(sig));
        server_.abort_in_flight();
      }
    }
  }

  server::HttpServer& server_;
  sigset_t signals_;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  std::thread thread_;
};

// "org/name" (a Hugging Face id's shape): two parts of letters, digits, '-',
// '_' and '.', neither starting with '.'.
bool looks_like_hub_id(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  const auto part_ok = [](std::string_view part) {
    if (part.empty() || part.front() == '.') return false;
    for (char c : part) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
        return false;
      }
    }
    return true;
  };
  const std::string_view view(text);
  return part_ok(view.substr(0, slash)) && part_ok(view.substr(slash + 1));
}

// The Hugging Face cache's snapshot of `id` ("org/name"), as the hub
// library lays it out: $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub; models--org--name/snapshots/<the revision
// refs/main names, or the only snapshot>. `looked` gets the folder searched.
std::optional<std::filesystem::path> cached_snapshot(const std::string& id, std::string* looked) {
  namespace fs = std::filesystem;
  fs::path hub;
  if (const char* cache = std::getenv("HF_HUB_CACHE"); cache != nullptr && *cache != '\0') {
    hub = cache;
  } else if (const char* home = std::getenv("HF_HOME"); home != nullptr && *home != '\0') {
    hub = fs::path(home) / "hub";
  } else if (const char* user = std::getenv("HOME"); user != nullptr) {
    hub = fs::path(user) / ".cache" / "huggingface" / "hub";
  }
  std::string folder = "models--" + id;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = hub / folder;
  *looked = repo.string();
  std::error_code ec;
  std::string revision;
  if (auto ref = model::read_text_file(repo / "refs" / "main"); ref.ok()) {
    revision = *ref;
    while (!revision.empty() && std::isspace(static_cast<unsigned char>(revision.back()))) {
      revision.pop_back();
    }
  }
  if (!revision.empty() && fs::is_directory(repo / "snapshots" / revision, ec)) {
    return repo / "snapshots" / revision;
  }
  std::vector<fs::path> snapshots;
  for (const auto& entry : fs::directory_iterator(repo / "snapshots", ec)) {
    if (entry.is_directory(ec)) snapshots.push_back(entry.path());
  }
  if (snapshots.size() == 1) return snapshots.front();
  return std::nullopt;
}

// The model folder from `vpod serve MODEL` or --model (one of them, or both
// the same). A Hugging Face id that is no folder here is looked up in the
// local Hugging Face cache; not found there, the error says how to fetch it.
std::string model_folder(const ServeArgs& a) {
  if (!a.model_positional.empty() && !a.model.empty() && a.model_positional != a.model) {
    fail(fmt::format("the model is given twice and differently ('{}' and --model '{}'): give it "
                     "once",
                     a.model_positional, a.model),
         2);
  }
  const std::string model = a.model.empty() ? a.model_positional : a.model;
  if (model.empty()) fail("give a model folder: vpod serve MODEL_DIR (or --model MODEL_DIR)", 2);
  std::error_code ec;
  if (!std::filesystem::exists(model, ec) && looks_like_hub_id(model)) {
    std::string looked;
    if (auto snapshot = cached_snapshot(model, &looked)) {
      VPOD_LOG_INFO("{}: the Hugging Face cache's snapshot {}", model, snapshot->string());
      return snapshot->string();
    }
    const std::string name = model.substr(model.find('/') + 1);
    fail(fmt::format("'{}' is not a folder here, nor in the Hugging Face cache ({}). vpod "
                     "reads local model folders only and downloads nothing; if this is a "
                     "Hugging Face model id, fetch it first:\n"
                     "  huggingface-cli download {} --local-dir models/{}\n"
                     "then run: vpod serve models/{}",
                     model, looked, model, name, name),
         2);
  }
  return model;
}

void run(ServeArgs& a) {
  SignalWatcher::block_in_all_threads();
  const std::string given = a.model.empty() ? a.model_positional : a.model;
  a.model = model_folder(a);
  a.engine.stack.model_dir = a.model;
  // Clients name the model as it was given (a Hugging Face id stays one).
  if (a.engine.served_model_names.empty()) a.engine.served_model_names.push_back(given);
  const auto size_flag = [](const char* flag, const std::string& text) {
    const auto bytes = parse_size(text);
    if (!bytes) fail(fmt::format("{}: not a size: {}", flag, text), 2);
    return *bytes;
  };
  const auto seconds_flag = [](const char* flag, double seconds) {
    if (!(seconds > 0)) fail(fmt::format("{} must be > 0 seconds", flag), 2);
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  };
  server::HttpLimits& limits = a.http.limits;
  limits.max_body_bytes = size_flag("--max-request-body", a.max_request_body);
  limits.max_header_bytes = size_flag("--max-header-bytes", a.max_header_bytes);
  limits.max_stream_buffer_bytes = size_flag("--max-stream-buffer", a.max_stream_buffer);
  a.engine.template_memory_bytes = size_flag("--max-template-memory", a.max_template_memory);
  limits.header_timeout = seconds_flag("--header-timeout", a.header_timeout_s);
  limits.body_timeout = seconds_flag("--body-timeout", a.body_timeout_s);
  limits.keep_alive_timeout = seconds_flag("--keep-alive-timeout", a.keep_alive_timeout_s);
  limits.write_timeout = seconds_flag("--write-timeout", a.write_timeout_s);
  if (limits.max_header_count < 1) fail("--max-header-count must be >= 1", 2);
  if (limits.max_connections < 1) fail("--max-connections must be >= 1", 2);
  if (a.http.io_threads < 1) fail("--http-threads must be >= 1", 2);
  if (a.http.http_workers < 0) fail("--http-workers must be >= 0", 2);
  a.http.log_requests = !a.disable_log_requests;
  if (a.disable_log_stats) a.http.stats_interval = std::chrono::milliseconds(0);
  if (a.drain_timeout_s < 0) fail("--drain-timeout must be >= 0", 2);

  server::HttpServer http(a.http);
  if (Status bound = http.bind(); !bound.ok()) fail(bound.message());
  SignalWatcher signals(http);
  Status served;
  std::thread serve_thread([&] { served = http.serve(); });
  const std::string base_url = fmt::format("http://{}:{}", a.http.host, http.port());
  VPOD_LOG_INFO("listening on {} (loading {})", base_url, a.model);

  const auto load_start = std::chrono::steady_clock::now();
  auto loaded = server::EngineBackend::load(a.engine);
  int exit_code = 0;
  std::unique_ptr<server::EngineBackend> backend;
  if (!loaded.ok()) {
    std::fprintf(stderr, "vpod serve: cannot load %s: %s\n", a.model.c_str(),
                 loaded.status().to_string().c_str());
    exit_code = 1;
    signals.request_stop();
  } else {
    backend = std::move(loaded).value();
    http.attach(backend.get());
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    VPOD_LOG_INFO("loaded in {:.1f} s: {}", load_s, backend->summary());
    std::string auth;
    if (!a.http.api_key.empty()) auth = " -H \"Authorization: Bearer $VPOD_API_KEY\"";
    std::printf(
        "vpod serve: ready on %s, model \"%s\"\n  curl %s/v1/completions -H 'Content-Type: "
        "application/json'%s -d '{\"model\": \"%s\", \"prompt\": \"Hello, my name is\", "
        "\"max_tokens\": 16}'\n",
        base_url.c_str(), backend->model().id.c_str(), base_url.c_str(), auth.c_str(),
        backend->model().id.c_str());
    std::fflush(stdout);
  }

  signals.wait_for_stop();
  http.shutdown(std::chrono::milliseconds(static_cast<std::int64_t>(a.drain_timeout_s * 1000)));
  serve_thread.join();
  backend.reset();  // stops the engine
  if (!served.ok()) {
    std::fprintf(stderr, "vpod serve: %s\n", served.to_string().c_str());
    exit_code = 1;
  }
  VPOD_LOG_INFO("stopped");
  if (exit_code != 0) throw CLI::RuntimeError(exit_code);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto a = std::make_shared<ServeArgs>();
  server::EngineBackendOptions& e = a->engine;
  server::ServerConfig& h = a->http;
  cmd->add_option("model", a->model_positional,
                  "Hugging Face model folder (local; or give --model)");
  cmd->add_option("--model", a->model, "Hugging Face model folder (local)");
  cmd->add_option("--served-model-name", e.served_model_names,
                  "Names clients may use in 'model'; the first is reported (default: the model "
                  "folder as given)")
      ->expected(1, -1);
  cmd->add_option("--tokenizer", e.tokenizer_dir,
                  "Folder with the tokenizer files and chat template (default: the model's)");
  cmd->add_option("--chat-template", e.chat_template,
                  "Chat template: a file, or the Jinja template itself (default: the "
                  "tokenizer's)");
  cmd->add_option("--generation-config", e.generation_config,
                  "Default sampling parameters: auto (the model's generation_config.json), "
                  "vllm (none: the engine's), or a folder holding generation_config.json")
      ->capture_default_str();
  cmd->add_option("--max-logprobs", e.max_logprobs,
                  "Most logprobs / top_logprobs a request may ask for (400 above)")
      ->capture_default_str();
  cmd->add_flag("--enable-auto-tool-choice", e.enable_auto_tool_choice,
                "Parse tool calls from the model's output for tool_choice \"auto\" (needs "
                "--tool-call-parser)");
  cmd->add_option("--tool-call-parser", e.tool_call_parser,
                  "The model's tool-call syntax: hermes (also qwen3, qwen2_5), llama3_json "
                  "(llama4_json) or mistral");
  cmd->add_option("--reasoning-parser", e.reasoning_parser,
                  "Put the model's reasoning in reasoning_content: qwen3 (<think>...</think>)");
  cmd->add_option("--host", h.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", h.port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", h.api_key,
                  "Require 'Authorization: Bearer KEY' (also read from $VPOD_API_KEY)")
      ->envname("VPOD_API_KEY");
  add_stack_flags(*cmd, e.stack);
  cmd->add_option("--seed", e.stack.seed, "Seeds the requests that bring no seed")
      ->capture_default_str();
  cmd->add_option("--http-threads", h.io_threads,
                  "HTTP event-loop threads (sockets and streams; connections are asynchronous)")
      ->capture_default_str();
  cmd->add_option("--http-workers", h.http_workers,
                  "Threads that parse, tokenize and render chat templates (0: the cores)")
      ->capture_default_str();
  cmd->add_option("--responses-store-max", h.responses_store.max_responses,
                  "Finished /v1/responses kept for previous_response_id (0: none; oldest "
                  "evicted first)")
      ->capture_default_str();
  cmd->add_option("--responses-store-max-bytes", h.responses_store.max_bytes,
                  "Byte budget of the kept responses (JSON size)")
      ->capture_default_str();
  cmd->add_option("--max-connections", h.limits.max_connections,
                  "Open connections; beyond it idle ones are closed, else 503")
      ->capture_default_str();
  cmd->add_option("--max-request-body", a->max_request_body,
                  "Largest request body as sent (413 above; compressed bodies get 415)")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", a->max_header_bytes,
                  "Largest request line + headers (431 above)")
      ->capture_default_str();
  cmd->add_option("--max-header-count", h.limits.max_header_count, "Most headers (431 above)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", a->header_timeout_s,
                  "Seconds from a request's first byte until its headers are complete")
      ->capture_default_str();
  cmd->add_option("--body-timeout", a->body_timeout_s,
                  "Seconds from the headers until the body is complete")
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", a->keep_alive_timeout_s,
                  "Seconds an idle keep-alive connection stays open")
      ->capture_default_str();
  cmd->add_option("--write-timeout", a->write_timeout_s,
                  "Seconds one write to a client may wait for it to read")
      ->capture_default_str();
  cmd->add_option("--max-stream-buffer", a->max_stream_buffer,
                  "A stream's output waiting for a slow reader; above it the request is aborted")
      ->capture_default_str();
  cmd->add_option("--max-template-memory", a->max_template_memory,
                  "Memory all concurrent chat-template renders may use together")
      ->capture_default_str();
  cmd->add_flag("--disable-log-requests", a->disable_log_requests,
                "No access-log line per request");
  cmd->add_flag("--disable-log-stats", a->disable_log_stats,
                "No periodic stats line (every 10 s while busy)");
  cmd->add_option("--drain-timeout", a->drain_timeout_s,
                  "Seconds in-flight requests may finish after SIGINT/SIGTERM")
      ->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::cli
