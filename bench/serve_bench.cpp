// `vpod bench serve`: a load generator for any OpenAI-compatible server
// (vpod's or vLLM's). It builds a dataset of (input, output) lengths, turns
// each into a prompt of exactly that many token ids of the served tokenizer,
// sends the requests as Poisson/gamma arrivals at a rate (or all at once)
// under an optional concurrency cap, streams every completion and reports
// the metrics exactly as `vllm bench serve` defines them
// (bench/serve/metrics.h): a live progress line on stderr, the result table
// on stdout, everything with --json FILE. For prefix caching it also has a
// shared-system-prompt and a multi-turn chat dataset
// (bench/serve/prefix_datasets.h) and reports the server's prefix-cache hit
// rate over the run (its /metrics counters) and the responses' mean
// usage.prompt_tokens_details.cached_tokens, per turn for multi-turn.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "bench/benches.h"
#include "bench/serve/arrivals.h"
#include "bench/serve/dataset.h"
#include "bench/serve/http_client.h"
#include "bench/serve/metrics.h"
#include "bench/serve/prefix_datasets.h"
#include "bench/serve/prometheus.h"
#include "bench/serve/report.h"
#include "bench/serve/runner.h"
#include "vpod/build_info.h"

namespace vpod::bench {
namespace {

using namespace serve;
using nlohmann::json;

struct Args {
  std::string base_url;
  std::string endpoint = "completions";
  std::string model;
  std::string api_key;
  std::string dataset = "random";
  int num_prompts = 200;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;
  int prefix_len = 8192;      // shared-prefix
  int unique_len = 64;        // shared-prefix
  int num_conversations = 8;  // multi-turn
  int num_turns = 10;         // multi-turn
  int turn_len = 1024;        // multi-turn
  std::string trace;
  int arxiv_max_total = 16384;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int max_concurrency = 0;
  std::uint64_t seed = 0;
  std::string slo;
  std::string percentiles = "90,99";
  std::string json_path;
  double timeout_s = 3600.0;
  bool no_ignore_eos = false;
  int vocab_size = 0;
  bool no_test_request = false;
  bool no_progress = false;
  std::vector<std::string> metadata;  // KEY=VALUE pairs copied into the JSON
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "vpod bench serve: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

template <typename T>
T value_or_fail(Result<T> result, std::string_view context) {
  if (!result.ok()) fail(fmt::format("{}: {}", context, result.status().message()));
  return std::move(result).value();
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double p = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(p > 0.0 && p < 100.0)) {
      fail(fmt::format("--percentiles: '{}' is not a percentile in (0, 100)", item));
    }
    out.push_back(p);
  }
  return out;
}

std::vector<RequestLengths> make_lengths(const Args& a) {
  if (a.dataset == "random" || a.dataset == "fixed") {
    const RandomLengths spec{.input_len = a.input_len,
                             .output_len = a.output_len,
                             .range_ratio = a.dataset == "fixed" ? 0.0 : a.range_ratio};
    if (Status s = validate(spec); !s.ok()) fail(s.message());
    return sample_random_lengths(a.num_prompts, spec, a.seed);
  }
  if (a.dataset == "arxiv") {
    const ArxivLengths spec{.max_total = a.arxiv_max_total};
    if (Status s = validate(spec); !s.ok()) fail(s.message());
    return sample_arxiv_lengths(a.num_prompts, spec, a.seed);
  }
  // trace: the file's requests in order, the first --num-prompts of them.
  std::ifstream file(a.trace);
  if (a.trace.empty() || !file) fail(fmt::format("--dataset trace needs a readable --trace file"));
  std::stringstream text;
  text << file.rdbuf();
  auto lengths = value_or_fail(parse_trace_csv(text.str()), a.trace);
  if (static_cast<int>(lengths.size()) > a.num_prompts) lengths.resize(a.num_prompts);
  return lengths;
}

std::vector<std::int32_t> vocabulary_pool(const OpenAiClient& client, const Args& a,
                                          const std::string& model) {
  auto ids = client.tokenize(model, kVocabularySampleText);
  if (ids.ok() && !ids->empty()) {
    const std::set<std::int32_t> unique(ids->begin(), ids->end());
    return {unique.begin(), unique.end()};
  }
  if (a.vocab_size <= 0) {
    fail(
        fmt::format("cannot learn the served vocabulary ({}); pass --vocab-size N to draw "
                    "prompt ids from [0, N) instead",
                    ids.ok() ? "/tokenize returned no ids" : ids.status().message()));
  }
  std::vector<std::int32_t> pool(a.vocab_size);
  for (int i = 0; i < a.vocab_size; ++i) pool[i] = i;
  return pool;
}

// Prints "N/M done ..." on stderr while the run lasts: in place on a
// terminal, every 10 s otherwise (logs).
class ProgressLine {
 public:
  ProgressLine(const RunProgress& progress, int total, bool enabled)
      : progress_(progress), total_(total), tty_(isatty(STDERR_FILENO) != 0) {
    if (enabled) thread_ = std::thread([this] { loop(); });
  }
  ~ProgressLine() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
      thread_.join();
      print();
      std::fputc('\n', stderr);
    }
  }

 private:
  void loop() {
    const auto period = tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(10);
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
      print();
      if (!tty_) std::fputc('\n', stderr);
    }
  }
  void print() {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const int completed = progress_.completed.load();
    const int failed = progress_.failed.load();
    const int in_flight = progress_.sent.load() - completed - failed;
    const long long tokens = progress_.output_tokens.load();
    std::fprintf(stderr,
                 "%s[bench serve] %d/%d done, %d failed, %d in flight, %.1f s, %.1f out tok/s",
                 tty_ ? "\r" : "", completed, total_, failed, in_flight, elapsed,
                 elapsed > 0 ? tokens / elapsed : 0.0);
    std::fflush(stderr);
  }

  using Clock = std::chrono::steady_clock;
  const RunProgress& progress_;
  const int total_;
  const bool tty_;
  const Clock::time_point start_ = Clock::now();
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// The server's own view of the run, from its /metrics histograms (vLLM's
// names, which vpod exports, or an older vpod's vpod_ ones): mean TTFT, TPOT
// and E2E latency over the requests that finished between two scrapes, next
// to the client's means. TPOT is the per-request mean, as the client's is:
// vLLM's request_time_per_output_token_seconds where there is one (its
// time_per_output_token_seconds holds every inter-token gap since 0.11).
struct ServerView {
  std::string prefix;
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
};

std::optional<ServerView> server_view(const std::string& before, const std::string& after) {
  for (const char* prefix : {"vpod_", "vllm:"}) {
    const auto mean_ms = [&](const char* name) -> std::optional<double> {
      const std::string histogram = std::string(prefix) + name;
      const auto b = prometheus_histogram(before, histogram);
      const auto a = prometheus_histogram(after, histogram);
      if (!a || !b) return std::nullopt;
      const auto mean = mean_between(*b, *a);
      if (!mean) return std::nullopt;
      return *mean * 1e3;
    };
    auto tpot_ms = mean_ms("request_time_per_output_token_seconds");
    if (!tpot_ms) tpot_ms = mean_ms("time_per_output_token_seconds");
    ServerView view{prefix, mean_ms("time_to_first_token_seconds"), tpot_ms,
                    mean_ms("e2e_request_latency_seconds")};
    if (view.ttft_ms || view.tpot_ms || view.e2el_ms) return view;
  }
  return std::nullopt;
}

std::string format_server_view(const ServerView& v, const BenchmarkMetrics& m) {
  std::string out = fmt::format("{:-^50}\n", fmt::format("Server /metrics ({})", v.prefix));
  const auto row = [&](const char* name, const std::optional<double>& server, double client) {
    if (!server) return;
    const std::string label = fmt::format("Mean {} server / client (ms):", name);
    out += fmt::format("{:<40}{:.2f} / {:.2f} ({:+.1f}%)\n", label, *server, client,
                       client > 0 ? (*server / client - 1.0) * 100.0 : 0.0);
  };
  row("TTFT", v.ttft_ms, m.ttft_ms.mean);
  row("TPOT", v.tpot_ms, m.tpot_ms.mean);
  row("E2EL", v.e2el_ms, m.e2el_ms.mean);
  out += std::string(50, '=') + "\n";
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The requests of every dataset but multi-turn: a fixed prompt each. Index
// num_requests is the test request sent before the run.
struct FixedPrompts {
  std::vector<std::vector<std::int32_t>> ids;      // completions (and their lengths)
  std::vector<std::vector<ChatMessage>> messages;  // chat
  std::vector<int> output_lens;
};

std::string detokenize_or_fail(const OpenAiClient& client, const std::string& model,
                               std::span<const std::int32_t> ids) {
  return value_or_fail(client.detokenize(model, ids), "chat prompt text");
}

FixedPrompts make_fixed_prompts(const Args& a, const OpenAiClient& client, const std::string& model,
                                Endpoint endpoint, std::span<const std::int32_t> pool) {
  FixedPrompts p;
  const bool chat = endpoint == Endpoint::chat;
  if (a.dataset == "shared-prefix") {
    // The test request shares the prefix with a unique part of its own: it
    // warms the prefix, as a server that has seen its system prompt before.
    const SharedPrefixSpec spec{
        .num_requests = a.num_prompts + 1, .prefix_len = a.prefix_len, .unique_len = a.unique_len};
    if (Status s = validate(spec); !s.ok()) fail(s.message());
    if (a.output_len < 1) fail("--output-len must be >= 1");
    const SharedPrefixPrompts prompts = make_shared_prefix_prompts(pool, spec, a.seed);
    // Chat: the prefix as the system message, so the template keeps it
    // token for token at the start of every prompt.
    const std::string prefix_text = chat ? detokenize_or_fail(client, model, prompts.prefix) : "";
    for (int i = 0; i < spec.num_requests; ++i) {
      p.ids.push_back(prompts.prompt(i));
      if (chat) {
        p.messages.push_back({{"system", prefix_text},
                              {"user", detokenize_or_fail(client, model, prompts.unique[i])}});
      }
      p.output_lens.push_back(a.output_len);
    }
    return p;
  }
  const std::vector<RequestLengths> lengths = make_lengths(a);
  std::mt19937_64 rng(a.seed ^ 0x9e3779b97f4a7c15ULL);
  for (const RequestLengths& l : lengths) {
    p.ids.push_back(make_prompt_ids(pool, l.input_len, rng));
    if (chat) p.messages.push_back({{"user", detokenize_or_fail(client, model, p.ids.back())}});
    p.output_lens.push_back(l.output_len);
  }
  // The test request is the first request, as vLLM's.
  p.ids.push_back(p.ids.front());
  if (chat) p.messages.push_back(p.messages.front());
  p.output_lens.push_back(p.output_lens.front());
  return p;
}

void run(const Args& a) {
  if (a.num_prompts < 1) fail("--num-prompts must be >= 1");
  if (!(a.request_rate > 0.0)) fail("--request-rate must be > 0 (inf: all at once)");
  if (!(a.burstiness > 0.0)) fail("--burstiness must be > 0");
  if (a.max_concurrency < 0) fail("--max-concurrency must be >= 0 (0: unlimited)");
  if (a.endpoint != "completions" && a.endpoint != "chat") {
    fail("--endpoint must be completions or chat");
  }
  for (const std::string& kv : a.metadata) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      fail(fmt::format("--metadata '{}' is not KEY=VALUE", kv));
    }
  }
  const bool multi_turn = a.dataset == "multi-turn";
  const MultiTurnSpec turn_spec{.num_conversations = a.num_conversations,
                                .num_turns = a.num_turns,
                                .turn_len = a.turn_len,
                                .output_len = a.output_len,
                                .range_ratio = a.range_ratio};
  if (multi_turn) {
    if (Status s = validate(turn_spec); !s.ok()) fail(s.message());
  }
  const Endpoint endpoint = a.endpoint == "chat" ? Endpoint::chat : Endpoint::completions;
  const bool chat = endpoint == Endpoint::chat;
  const std::vector<double> percentiles = parse_percentiles(a.percentiles);
  const Slo slo = a.slo.empty() ? Slo{} : value_or_fail(parse_slo(a.slo), "--slo");

  std::string api_key = a.api_key;
  if (api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) api_key = env;
  }
  const OpenAiClient client(value_or_fail(parse_base_url(a.base_url), "--base-url"), api_key,
                            a.timeout_s);
  const std::string model =
      a.model.empty() ? value_or_fail(client.first_model_id(), "listing models") : a.model;
  const std::vector<std::int32_t> pool = vocabulary_pool(client, a, model);

  // What is sent. Completions: exact token-id sequences; chat: their text
  // (the template then adds its own tokens; usage reports the true count).
  // Requests are chains of one step, or conversations of num_turns turns:
  // request i is step i % num_steps of chain i / num_steps.
  FixedPrompts fixed;
  std::vector<ConversationScript> scripts;
  std::vector<Conversation> conversations;
  if (multi_turn) {
    // One conversation more than asked: its first turn is the test request.
    MultiTurnSpec spec = turn_spec;
    ++spec.num_conversations;
    scripts = make_conversations(pool, spec, a.seed);
    for (ConversationScript& script : scripts) {
      if (!chat) continue;
      for (const auto& ids : script.user_turns) {
        script.user_texts.push_back(detokenize_or_fail(client, model, ids));
      }
    }
    for (const ConversationScript& script : scripts) conversations.emplace_back(script);
  } else {
    fixed = make_fixed_prompts(a, client, model, endpoint, pool);
  }
  const int num_steps = multi_turn ? a.num_turns : 1;
  const int num_chains =
      multi_turn ? a.num_conversations : static_cast<int>(fixed.output_lens.size()) - 1;
  const int num_requests = num_chains * num_steps;
  // Per request, what was asked: written by the one thread that sends it.
  std::vector<int> sent_input_lens(num_requests), asked_output_lens(num_requests);

  // Sends step `step` of chain `chain`; chain num_chains is the test request.
  const auto send = [&](int chain, int step) {
    StreamRequest r;
    r.endpoint = endpoint;
    r.model = model;
    r.ignore_eos = !a.no_ignore_eos;
    std::vector<std::int32_t> turn_ids;      // multi-turn: this turn's prompt
    std::vector<ChatMessage> turn_messages;  // multi-turn chat: this turn's conversation
    int input_len = 0;                       // token ids of the prompt (chat: unknown, 0)
    if (multi_turn) {
      Conversation& conversation = conversations[chain];
      if (chat) {
        turn_messages = conversation.next_messages();
        r.messages = turn_messages;
      } else {
        turn_ids = conversation.next_prompt_ids();
        r.prompt_ids = turn_ids;
        input_len = static_cast<int>(turn_ids.size());
      }
      r.max_tokens = conversation.next_output_len();
    } else {
      if (chat) {
        r.messages = fixed.messages[chain];
      } else {
        r.prompt_ids = fixed.ids[chain];
      }
      input_len = static_cast<int>(fixed.ids[chain].size());
      r.max_tokens = fixed.output_lens[chain];
    }
    if (chain < num_chains) {
      const int index = chain * num_steps + step;
      sent_input_lens[index] = input_len;
      asked_output_lens[index] = r.max_tokens;
    }
    RequestResult result = client.stream(r);
    if (multi_turn && result.success) {
      // The next turn resends this reply: as the server's token ids of the
      // text it streamed (completions), or as that text (chat).
      std::vector<std::int32_t> reply_ids;
      if (!chat && !result.generated_text.empty()) {
        auto tokens = client.tokenize(model, result.generated_text);
        if (!tokens.ok()) {
          result.success = false;
          result.error = "tokenizing the reply for the next turn: " + tokens.status().message();
          return result;
        }
        reply_ids = std::move(tokens).value();
      }
      conversations[chain].add_reply(result.generated_text, std::move(reply_ids));
    }
    return result;
  };

  std::fprintf(stderr,
               "[bench serve] %s model %s: %d requests (%s%s), rate %g req/s, burstiness %g, "
               "max concurrency %s\n",
               a.base_url.c_str(), model.c_str(), num_requests, a.dataset.c_str(),
               multi_turn
                   ? fmt::format(": {} conversations of {} turns", num_chains, num_steps).c_str()
                   : "",
               a.request_rate, a.burstiness,
               a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "unlimited");
  if (!a.no_test_request) {  // as vLLM: one request first, to fail fast on a broken setup
    const RequestResult test = send(num_chains, 0);
    if (!test.success) fail("the test request failed: " + test.error);
    std::fprintf(stderr, "[bench serve] test request ok: TTFT %.1f ms, %d output tokens\n",
                 test.ttft_s * 1e3, test.output_tokens);
  }

  // Arrivals: of requests, or of conversations (whose turns follow replies).
  const std::vector<double> arrivals =
      arrival_times(num_chains, a.request_rate, a.burstiness, a.seed);
  const Result<std::string> metrics_before = client.metrics_text();
  RunProgress progress;
  ProgressLine line(progress, num_requests, !a.no_progress);
  const RunOutcome outcome = run_chains(arrivals, num_steps, a.max_concurrency, send, progress);
  line.stop();
  const Result<std::string> metrics_after = client.metrics_text();

  // Say when the server did not honour the lengths asked for.
  int prompt_mismatch = 0, output_mismatch = 0, no_usage = 0;
  std::string first_error;
  for (int i = 0; i < num_requests; ++i) {
    const RequestResult& r = outcome.results[i];
    if (!r.success) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    if (!chat && r.prompt_len != sent_input_lens[i]) ++prompt_mismatch;
    if (!a.no_ignore_eos && r.output_tokens != asked_output_lens[i]) ++output_mismatch;
    if (!r.output_tokens_from_usage) ++no_usage;
  }
  if (!first_error.empty()) {
    std::fprintf(stderr, "[bench serve] warning: %d requests failed; first error: %s\n",
                 progress.failed.load(), first_error.c_str());
  }
  if (prompt_mismatch > 0) {
    std::fprintf(stderr,
                 "[bench serve] warning: %d requests' usage.prompt_tokens differ from the "
                 "prompt length sent\n",
                 prompt_mismatch);
  }
  if (output_mismatch > 0) {
    std::fprintf(stderr,
                 "[bench serve] warning: %d requests produced another number of tokens than "
                 "max_tokens (does the server honour ignore_eos?)\n",
                 output_mismatch);
  }
  if (no_usage > 0) {
    std::fprintf(stderr,
                 "[bench serve] warning: %d streams carried no usage; their output tokens are "
                 "counted as content chunks\n",
                 no_usage);
  }

  const BenchmarkMetrics metrics =
      compute_metrics(outcome.results, outcome.duration_s, slo, percentiles);
  std::fputs(format_table(metrics, outcome.max_in_flight).c_str(), stdout);
  std::optional<ServerView> server;
  std::optional<PrefixCacheDelta> prefix_cache;
  if (metrics_before.ok() && metrics_after.ok()) {
    server = server_view(*metrics_before, *metrics_after);
    prefix_cache = prefix_cache_between(*metrics_before, *metrics_after);
  }
  if (server) {
    std::fputs(format_server_view(*server, metrics).c_str(), stdout);
  } else {
    std::fprintf(stderr, "[bench serve] no server-side latency histograms in /metrics (%s)\n",
                 metrics_before.ok() ? "no vpod_/vllm: histograms"
                                     : metrics_before.status().message().c_str());
  }
  std::fputs(format_prefix_cache(prefix_cache, metrics, multi_turn || a.dataset == "shared-prefix")
                 .c_str(),
             stdout);
  std::vector<TurnMetrics> turns;
  if (multi_turn) {
    turns = compute_turn_metrics(outcome.results, num_steps, percentiles);
    std::fputs(format_turn_table(turns).c_str(), stdout);
  }
  std::fflush(stdout);

  if (!a.json_path.empty()) {
    json j = metrics_json(metrics, outcome.results);
    j["date"] = utc_now();
    j["vpod_version"] = std::string(build_info::version);
    j["vpod_commit"] = std::string(build_info::git_commit);
    j["base_url"] = a.base_url;
    j["endpoint"] = a.endpoint;
    j["model_id"] = model;
    j["dataset"] = a.dataset;
    if (a.dataset == "trace") j["trace"] = a.trace;
    if (a.dataset == "shared-prefix") {
      j["prefix_len"] = a.prefix_len;
      j["unique_len"] = a.unique_len;
    }
    if (multi_turn) {
      j["num_conversations"] = num_chains;
      j["num_turns"] = num_steps;
      j["turn_len"] = a.turn_len;
      j["turns"] = turn_metrics_json(turns);
    }
    j["prefix_cache"] = prefix_cache_json(prefix_cache);
    j["prefix_cache_hit_rate"] =
        prefix_cache && prefix_cache->hit_rate() ? json(*prefix_cache->hit_rate()) : json(nullptr);
    j["num_prompts"] = num_requests;
    j["request_rate"] = std::isinf(a.request_rate) ? json("inf") : json(a.request_rate);
    j["burstiness"] = a.burstiness;
    j["max_concurrency"] = a.max_concurrency > 0 ? json(a.max_concurrency) : json(nullptr);
    j["max_in_flight"] = outcome.max_in_flight;
    j["seed"] = a.seed;
    j["ignore_eos"] = !a.no_ignore_eos;
    j["slo"] = a.slo;
    for (const std::string& kv : a.metadata) {
      const std::size_t eq = kv.find('=');
      j[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (server) {
      const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
      j["server_metrics"] = {{"prefix", server->prefix},
                             {"mean_ttft_ms", opt(server->ttft_ms)},
                             {"mean_tpot_ms", opt(server->tpot_ms)},
                             {"mean_e2el_ms", opt(server->e2el_ms)}};
    }
    j["percentiles"] = percentiles;
    // Prompt token ids drawn (multi-turn: the whole conversation so far;
    // unknown for multi-turn chat) and output tokens asked.
    j["requested_input_lens"] = chat && multi_turn ? json(nullptr) : json(sent_input_lens);
    j["requested_output_lens"] = asked_output_lens;
    std::ofstream out(a.json_path);
    out << j.dump(1) << '\n';
    if (!out) fail(fmt::format("cannot write {}", a.json_path));
    std::fprintf(stderr, "[bench serve] wrote %s\n", a.json_path.c_str());
  }
  if (metrics.completed == 0) fail("no request succeeded");
}

}  // namespace

void add_serve_bench(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "Load-test an OpenAI-compatible server (vpod, vLLM, ...) and report TTFT, TPOT, "
      "ITL, E2E latency, throughput and goodput as `vllm bench serve` defines them");
  auto a = std::make_shared<Args>();
  cmd->add_option("--base-url", a->base_url, "Server URL, e.g. http://127.0.0.1:8000")->required();
  cmd->add_option("--endpoint", a->endpoint,
                  "completions (prompts sent as token ids) or chat (as text)")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_option("--model", a->model, "Model name (default: the first of /v1/models)");
  cmd->add_option("--api-key", a->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--dataset", a->dataset,
                  "random (--input-len/--output-len/--range-ratio), fixed, arxiv (the papers' "
                  "arXiv-summarization length distribution, bench/datasets/README.md), trace "
                  "(--trace CSV), shared-prefix (--num-prompts prompts of one --prefix-len "
                  "prefix + --unique-len ids each) or multi-turn (--num-conversations x "
                  "--num-turns, each turn resending the conversation + --turn-len new ids)")
      ->check(CLI::IsMember({"random", "fixed", "arxiv", "trace", "shared-prefix", "multi-turn"}))
      ->capture_default_str();
  cmd->add_option("--num-prompts", a->num_prompts, "Requests to send (not multi-turn)")
      ->capture_default_str();
  cmd->add_option("--prefix-len", a->prefix_len,
                  "shared-prefix: token ids every prompt starts with")
      ->capture_default_str();
  cmd->add_option("--unique-len", a->unique_len,
                  "shared-prefix: token ids of each prompt's own, after the prefix")
      ->capture_default_str();
  cmd->add_option("--num-conversations", a->num_conversations,
                  "multi-turn: conversations (each holds a --max-concurrency slot while it lasts; "
                  "--request-rate spaces their starts)")
      ->capture_default_str();
  cmd->add_option("--num-turns", a->num_turns,
                  "multi-turn: turns per conversation, each sent once the previous reply arrived")
      ->capture_default_str();
  cmd->add_option("--turn-len", a->turn_len,
                  "multi-turn: new user tokens per turn (with --range-ratio)")
      ->capture_default_str();
  cmd->add_option("--input-len,--random-input-len", a->input_len, "Prompt tokens (random, fixed)")
      ->capture_default_str();
  cmd->add_option("--output-len,--random-output-len", a->output_len,
                  "Output tokens (random, fixed, shared-prefix; multi-turn: per reply)")
      ->capture_default_str();
  cmd->add_option("--range-ratio,--random-range-ratio", a->range_ratio,
                  "random: lengths uniform in [L(1-r), L(1+r)], r in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--trace", a->trace,
                  "CSV with num_prefill_tokens,num_decode_tokens (or input_len,output_len)");
  cmd->add_option("--arxiv-max-total", a->arxiv_max_total,
                  "arxiv: longest prompt + output (the papers' trace: 16384)")
      ->capture_default_str();
  cmd->add_option("--request-rate", a->request_rate,
                  "Mean requests per second (inf: send all at once)")
      ->capture_default_str();
  cmd->add_option("--burstiness", a->burstiness,
                  "Gamma shape of the gaps: 1 Poisson, < 1 burstier, > 1 more regular")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", a->max_concurrency,
                  "Most requests in flight at once (0: unlimited)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of lengths, prompts and arrivals")
      ->capture_default_str();
  cmd->add_option("--slo,--goodput", a->slo,
                  "Goodput SLOs in ms, e.g. ttft:2000,tpot:100 (keys ttft, tpot, e2el)");
  cmd->add_option("--percentiles,--metric-percentiles", a->percentiles,
                  "Percentiles to report besides mean and median")
      ->capture_default_str();
  cmd->add_option("--json", a->json_path, "Write metrics and per-request data as JSON");
  cmd->add_option("--timeout", a->timeout_s, "Per-request timeout in seconds")
      ->capture_default_str();
  cmd->add_flag("--no-ignore-eos", a->no_ignore_eos,
                "Do not send ignore_eos (output lengths then depend on the model)");
  cmd->add_option("--vocab-size", a->vocab_size,
                  "Draw prompt ids from [0, N) when the server has no /tokenize");
  cmd->add_flag("--no-test-request", a->no_test_request,
                "Skip the single request sent before the run");
  cmd->add_option("--metadata", a->metadata,
                  "KEY=VALUE pairs added to the JSON (e.g. mode=vattn+pod)");
  cmd->add_flag("--no-progress", a->no_progress, "No progress line on stderr");
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::bench
