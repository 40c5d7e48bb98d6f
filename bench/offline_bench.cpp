// `vpod bench offline`: the papers' offline throughput experiment. A static
// trace of requests is submitted all at once to the engine inside this
// process (no HTTP: the engine::EngineStack `vpod serve` runs on), and the
// makespan, from the first submission to the
// last request's final token, is measured. The modes are flags, so one binary
// compares vattn+pod, vattn+serial and paged+serial on the same trace:
//
//   vpod bench offline --model DIR --input-len 16384 --pd-ratio 100
//       --num-requests 64 --kv-cache vattn --attention pod --json out.json
//
// Output lengths are exact (ignore_eos + max_tokens, greedy sampling); a
// request that ends otherwise fails the run.
//
// --json-schema FILE puts that JSON Schema (structured output) on every
// request, to measure the grammar's mask work against the unconstrained step.
// The schema must not be completable within --output-len tokens (else the
// grammar ends requests early), e.g. bench/datasets/json_schema_long_array.json.
//
// A mode the backend does not have (--attention pod on the CPU, --kv-cache
// paged where the backend has no paged attention for the head size) is
// refused with the reason, as `vpod serve` refuses it: no number is
// reported for a mode that did not run.
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "bench/benches.h"
#include "bench/serve/dataset.h"
#include "cli/stack_flags.h"
#include "engine/engine_stack.h"
#include "tokenizer/tokenizer.h"
#include "vpod/build_info.h"

namespace vpod::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  engine::StackOptions stack;
  std::string model;
  std::string trace;
  int input_len = 0;
  int output_len = 0;
  double pd_ratio = 0.0;
  int num_requests = 64;
  std::uint64_t seed = 0;
  std::string json_path;
  std::string json_schema_path;  // structured output on every request
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "vpod bench offline: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

std::vector<serve::RequestLengths> make_trace(const Args& a) {
  if (!a.trace.empty()) {
    std::ifstream file(a.trace);
    if (!file) fail(fmt::format("cannot read --trace {}", a.trace));
    std::stringstream text;
    text << file.rdbuf();
    auto lengths = serve::parse_trace_csv(text.str());
    if (!lengths.ok()) fail(fmt::format("{}: {}", a.trace, lengths.status().message()));
    return std::move(lengths).value();
  }
  if (a.input_len < 1) fail("give --trace FILE, or --input-len with --output-len or --pd-ratio");
  if ((a.output_len > 0) == (a.pd_ratio > 0.0)) {
    fail("give exactly one of --output-len and --pd-ratio");
  }
  if (a.num_requests < 1) fail("--num-requests must be >= 1");
  const int output_len =
      a.output_len > 0 ? a.output_len : serve::output_len_for_pd_ratio(a.input_len, a.pd_ratio);
  return std::vector<serve::RequestLengths>(a.num_requests, {a.input_len, output_len});
}

// Runs `specs` through the engine all at once; returns the makespan in
// seconds, or fails naming the first request that did not end as asked.
double run_trace(engine::Engine& engine, std::vector<engine::RequestSpec> specs) {
  // Shared with the streams' callbacks: the engine thread calls one after it
  // pushed the final delta, which this thread may already have popped (and
  // returned), so the state must outlive this call.
  struct Wake {
    std::mutex mutex;
    std::condition_variable woken;
    bool pending = false;
  };
  const auto state = std::make_shared<Wake>();
  const auto wake = [state] {
    {
      std::lock_guard lock(state->mutex);
      state->pending = true;
    }
    state->woken.notify_one();
  };
  const int n = static_cast<int>(specs.size());
  std::vector<int> expected(n);
  std::vector<std::shared_ptr<engine::RequestStream>> streams(n);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) {
    expected[i] = specs[i].stop.max_tokens;
    auto stream = engine.submit(std::move(specs[i]), wake);
    if (!stream.ok()) fail(fmt::format("request {}: {}", i, stream.status().to_string()));
    streams[i] = std::move(stream).value();
  }
  Clock::time_point end = start;
  std::vector<bool> done(n, false);
  engine::RequestOutput out;
  for (int remaining = n; remaining > 0;) {
    {
      std::unique_lock lock(state->mutex);
      state->woken.wait_for(lock, std::chrono::milliseconds(50), [&] { return state->pending; });
      state->pending = false;
    }
    for (int i = 0; i < n; ++i) {
      if (done[i] || !streams[i]->try_pop(out) || !out.finished) continue;
      end = Clock::now();
      done[i] = true;
      --remaining;
      if (out.finish_reason != engine::FinishReason::length ||
          out.num_generated_tokens != expected[i]) {
        fail(fmt::format("request {} ended with '{}' after {} of {} tokens{}{}", i,
                         engine::finish_reason_name(out.finish_reason), out.num_generated_tokens,
                         expected[i], out.error.empty() ? "" : ": ", out.error));
      }
    }
  }
  return std::chrono::duration<double>(end - start).count();
}

std::vector<engine::RequestSpec> make_specs(const std::vector<serve::RequestLengths>& lengths,
                                            const std::vector<std::int32_t>& pool,
                                            std::uint64_t seed,
                                            const grammar::Constraint& constraint) {
  std::mt19937_64 rng(seed);
  std::vector<engine::RequestSpec> specs(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    specs[i].prompt_token_ids = serve::make_prompt_ids(pool, lengths[i].input_len, rng);
    specs[i].sampling.temperature = 0.0f;  // greedy: the same work in every mode
    specs[i].stop.max_tokens = lengths[i].output_len;
    specs[i].stop.ignore_eos = true;
    specs[i].constraint = constraint;
  }
  return specs;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void run(const Args& a) {
  const std::vector<serve::RequestLengths> lengths = make_trace(a);
  grammar::Constraint constraint;
  if (!a.json_schema_path.empty()) {
    std::ifstream file(a.json_schema_path);
    if (!file) fail(fmt::format("cannot read --json-schema {}", a.json_schema_path));
    std::stringstream text;
    text << file.rdbuf();
    constraint = {grammar::ConstraintKind::json_schema, text.str(), true};
  }
  long long prompt_tokens = 0, output_tokens = 0;
  int longest = 0;
  for (const auto& l : lengths) {
    prompt_tokens += l.input_len;
    output_tokens += l.output_len;
    longest = std::max(longest, l.input_len + l.output_len);
  }

  engine::StackOptions options = a.stack;
  options.model_dir = a.model;
  if (options.max_model_len == 0) options.max_model_len = longest;
  options.seed = a.seed;
  const Clock::time_point load_start = Clock::now();
  auto loaded = engine::EngineStack::build(options);
  if (!loaded.ok()) fail(loaded.status().to_string());
  engine::EngineStack& stack = **loaded;
  engine::Engine& engine = stack.engine();
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  std::fprintf(stderr, "[bench offline] %s (loaded in %.1f s)\n", stack.summary().c_str(), load_s);

  // Prompt ids: drawn from what the model's tokenizer makes of a sample text,
  // as `vpod bench serve` does (any valid ids would do for throughput).
  auto sample =
      stack.tokenizer()->encode(serve::kVocabularySampleText, /*add_special_tokens=*/false);
  if (!sample.ok() || sample->empty()) {
    fail("cannot tokenize the sample text: " +
         (sample.ok() ? std::string("no ids") : sample.status().to_string()));
  }
  const std::set<std::int32_t> unique(sample->begin(), sample->end());
  const std::vector<std::int32_t> pool(unique.begin(), unique.end());

  // Warm-up (lazy initialisation, first kernel launches), outside the timing:
  // a 256 + 4 token request, shorter when the first request is (it must fit
  // --max-model-len, which defaults to the longest request).
  const int warm_total = std::min(260, lengths[0].input_len + lengths[0].output_len);
  const int warm_output = std::min(4, warm_total - 1);
  const serve::RequestLengths warm{warm_total - warm_output, warm_output};
  // The warm-up compiles the schema too (the cache serves the timed run).
  run_trace(engine, make_specs({warm}, pool, a.seed + 1, constraint));

  const engine::MetricsSnapshot before = engine.metrics();
  const double makespan_s = run_trace(engine, make_specs(lengths, pool, a.seed, constraint));
  const engine::MetricsSnapshot after = engine.metrics();

  const auto steps = static_cast<double>(after.num_steps - before.num_steps);
  const double forward_s = after.step_time_total.forward_s - before.step_time_total.forward_s;
  const double prepare_s = after.step_time_total.prepare_s - before.step_time_total.prepare_s;
  const double schedule_s = after.step_time_total.schedule_s - before.step_time_total.schedule_s;
  const double commit_s = after.step_time_total.commit_s - before.step_time_total.commit_s;
  const double wait_s = after.step_time_total.wait_s - before.step_time_total.wait_s;
  const double hidden_s =
      after.step_time_total.host_hidden_s - before.step_time_total.host_hidden_s;
  const double exposed_s =
      after.step_time_total.host_exposed_s - before.step_time_total.host_exposed_s;
  const auto preemptions = after.num_preemptions - before.num_preemptions;
  const auto deferred = after.grammar_deferred_samples - before.grammar_deferred_samples;
  // Prefix cache over the trace, in prompt tokens looked up at admission and
  // found; no lookups (caching off) gives no rate rather than 0%.
  const std::int64_t cache_queries = after.prefix_cache_queries - before.prefix_cache_queries;
  const std::int64_t cache_hits = after.prefix_cache_hits - before.prefix_cache_hits;
  const bool has_hit_rate = cache_queries > 0;
  const double hit_rate =
      has_hit_rate ? static_cast<double>(cache_hits) / static_cast<double>(cache_queries) : 0.0;
  std::array<std::uint64_t, engine::kNumStepKinds> kinds{};
  for (int i = 0; i < engine::kNumStepKinds; ++i)
    kinds[i] = after.steps_by_kind[i] - before.steps_by_kind[i];
  const auto hybrid_steps = kinds[static_cast<int>(engine::StepKind::hybrid)];
  const double hybrid_decodes =
      hybrid_steps > 0
          ? static_cast<double>(after.hybrid_step_decodes - before.hybrid_step_decodes) /
                static_cast<double>(hybrid_steps)
          : 0.0;
  const int n = static_cast<int>(lengths.size());
  const std::string kv_cache(engine::kv_cache_kind_name(options.kv_cache));
  const std::string attention(engine::attention_choice_name(options.attention));
  const std::string async_scheduling = options.async_scheduling ? "on" : "off";
  const std::string kv_eager_allocation = options.kv_eager_allocation ? "on" : "off";
  const std::string mode = kv_cache + "+" + attention;
  const std::string model_name = std::filesystem::path(a.model).filename().string();

  std::string table = fmt::format("{:=^50}\n", " Offline Benchmark Result ");
  const auto row = [&](std::string_view label, std::string value) {
    table += fmt::format("{:<40}{}\n", label, value);
  };
  row("Model:", model_name);
  row("Mode (kv-cache+attention):", mode);
  const bool paged = options.kv_cache == engine::KvCacheKind::paged;
  const std::string paged_kernels =
      paged ? stack.model().backend().paged_attention_description() : std::string();
  if (paged) row("Paged attention:", paged_kernels);
  row("Prefix caching:", options.prefix_caching ? "on" : "off");
  row("JSON schema on every request:", a.json_schema_path.empty() ? "no" : a.json_schema_path);
  if (!a.json_schema_path.empty()) {
    row("Late grammar masks:", options.defer_late_masks ? "deferred" : "waited for");
  }
  row("Requests:", std::to_string(n));
  row("Prompt / output tokens:", fmt::format("{} / {}", prompt_tokens, output_tokens));
  row("Makespan (s):", fmt::format("{:.3f}", makespan_s));
  row("Request throughput (req/s):", fmt::format("{:.3f}", n / makespan_s));
  row("Output token throughput (tok/s):", fmt::format("{:.1f}", output_tokens / makespan_s));
  row("Total token throughput (tok/s):",
      fmt::format("{:.1f}", (prompt_tokens + output_tokens) / makespan_s));
  row("Engine steps:", fmt::format("{:.0f}", steps));
  row("Mean step (ms):", fmt::format("{:.3f}", steps > 0 ? makespan_s / steps * 1e3 : 0.0));
  row("Steps: hybrid / decode / prefill only:",
      fmt::format("{} / {} / {}", hybrid_steps, kinds[static_cast<int>(engine::StepKind::decode)],
                  kinds[static_cast<int>(engine::StepKind::prefill)]));
  row("Mean decodes per hybrid step:", fmt::format("{:.1f}", hybrid_decodes));
  row("Step time: forward / KV prepare (s):", fmt::format("{:.3f} / {:.3f}", forward_s, prepare_s));
  row("Step time: schedule / commit (s):", fmt::format("{:.3f} / {:.3f}", schedule_s, commit_s));
  row("Async scheduling:", async_scheduling);
  if (options.kv_cache == engine::KvCacheKind::vattn)
    row("KV eager allocation:", kv_eager_allocation);
  row("Host work hidden / exposed (s):", fmt::format("{:.3f} / {:.3f}", hidden_s, exposed_s));
  row("Host wait for the model (s):", fmt::format("{:.3f}", wait_s));
  row("Preemptions:", std::to_string(preemptions));
  if (!a.json_schema_path.empty()) {
    row("Decode rows deferred (late grammar mask):", std::to_string(deferred));
  }
  row("Prefix cache hit rate:",
      has_hit_rate
          ? fmt::format("{:.2f}% ({} of {} tokens)", hit_rate * 100.0, cache_hits, cache_queries)
          : std::string("n/a (no tokens looked up)"));
  table += std::string(50, '=') + "\n";
  std::fputs(table.c_str(), stdout);
  std::fflush(stdout);

  if (!a.json_path.empty()) {
    json j;
    j["date"] = utc_now();
    j["vpod_commit"] = std::string(build_info::git_commit);
    j["model"] = a.model;
    j["model_name"] = model_name;
    j["mode"] = mode;
    j["kv_cache"] = kv_cache;
    j["kv_layout"] = std::string(kvcache::kv_layout_name(options.kv_layout));
    // The paged baseline's kernels and version, and its block (FlashInfer's page).
    j["paged_kernels"] = paged ? json(paged_kernels) : json(nullptr);
    j["block_size"] =
        paged ? json(options.block_size.value_or(engine::kDefaultPagedBlockTokens)) : json(nullptr);
    j["attention"] = attention;
    j["prefix_caching"] = options.prefix_caching;
    j["json_schema"] = a.json_schema_path.empty() ? json(nullptr) : json(a.json_schema_path);
    j["backend"] = stack.summary();
    j["trace"] = a.trace.empty() ? json(nullptr) : json(a.trace);
    j["num_requests"] = n;
    j["input_len"] = a.trace.empty() ? json(a.input_len) : json(nullptr);
    j["output_len"] = a.trace.empty() ? json(lengths[0].output_len) : json(nullptr);
    j["pd_ratio"] = a.pd_ratio > 0 ? json(a.pd_ratio) : json(nullptr);
    j["prompt_tokens"] = prompt_tokens;
    j["output_tokens"] = output_tokens;
    j["max_num_seqs"] = options.max_num_seqs;
    j["max_num_batched_tokens"] = options.max_num_batched_tokens;
    j["load_s"] = load_s;
    j["makespan_s"] = makespan_s;
    j["requests_per_s"] = n / makespan_s;
    j["output_tokens_per_s"] = output_tokens / makespan_s;
    j["total_tokens_per_s"] = (prompt_tokens + output_tokens) / makespan_s;
    j["num_steps"] = steps;
    for (int i = 0; i < engine::kNumStepKinds; ++i) {
      j[fmt::format("num_{}_steps", engine::step_kind_name(static_cast<engine::StepKind>(i)))] =
          kinds[i];
    }
    j["mean_decodes_per_hybrid_step"] = hybrid_decodes;
    j["forward_s"] = forward_s;
    j["prepare_s"] = prepare_s;
    j["schedule_s"] = schedule_s;
    j["commit_s"] = commit_s;
    j["async_scheduling"] = async_scheduling;
    j["kv_eager_allocation"] = kv_eager_allocation;
    j["host_hidden_s"] = hidden_s;
    j["host_exposed_s"] = exposed_s;
    j["wait_s"] = wait_s;
    j["num_preemptions"] = preemptions;
    j["grammar_deferred_samples"] = deferred;
    j["defer_late_masks"] = options.defer_late_masks;
    j["prefix_cache_queries"] = cache_queries;
    j["prefix_cache_hits"] = cache_hits;
    j["prefix_cache_hit_rate"] = has_hit_rate ? json(hit_rate) : json(nullptr);
    std::ofstream out(a.json_path);
    out << j.dump(1) << '\n';
    if (!out) fail(fmt::format("cannot write {}", a.json_path));
  }
}

}  // namespace

using cli::add_stack_flags;

void add_offline_bench(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "offline", "Makespan of a static trace through the engine in this process (no HTTP)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Hugging Face model folder")->required();
  cmd->add_option("--trace", a->trace,
                  "CSV with num_prefill_tokens,num_decode_tokens (or input_len,output_len)");
  cmd->add_option("--input-len", a->input_len, "Prompt tokens of every request (no --trace)");
  cmd->add_option("--output-len", a->output_len, "Output tokens of every request");
  cmd->add_option("--pd-ratio", a->pd_ratio, "Prompt / output tokens (instead of --output-len)");
  cmd->add_option("--num-requests", a->num_requests, "Requests (no --trace)")
      ->capture_default_str();
  add_stack_flags(*cmd, a->stack);
  cmd->get_option("--max-model-len")->description("Longest request (default: the trace's longest)");
  cmd->add_option("--seed", a->seed, "Seed of the prompts")->capture_default_str();
  cmd->add_option("--json", a->json_path, "Write the result as JSON");
  cmd->add_option("--json-schema", a->json_schema_path,
                  "Constrain every request to this JSON Schema (structured output)");
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::bench
