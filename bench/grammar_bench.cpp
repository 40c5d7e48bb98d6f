// `vpod bench grammar --model DIR --json-schema FILE`: the CPU cost of
// structured output per engine step, without a GPU. A batch of matchers of
// one grammar walks in lockstep, as a constrained decode batch does: each
// step runs MaskWorkers' jobs (accept the previous step's token, fill the
// next-token bitmask) at each thread count asked for, then picks an allowed
// token per row (seeded, uniform over the allowed ids: a random-weight
// model's argmax under a mask is no more predictable). Reported: the jobs'
// wall time per step at each thread count, which the engine hides under the
// GPU forward (docs/structured_output.md), and its tail. Validates as it
// goes: no picked token is refused, and the threaded runs' masks equal the
// one-thread run's bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/benches.h"
#include "common/splitmix64.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_state.h"
#include "grammar/mask_workers.h"
#include "grammar/matcher.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace vpod::bench {
namespace {

struct GrammarBenchArgs {
  std::string model;
  std::string json_schema_path;
  int batch = 64;
  int steps = 256;
  std::vector<int> threads = {1, 2, 4, 8};
  std::uint64_t seed = 1;
  std::string json_path;
};

[[noreturn]] void fail(const std::string& message) {
  fmt::print(stderr, "vpod bench grammar: {}\n", message);
  std::exit(1);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    state += kSplitMix64Gamma;
    return splitmix64_finalize(state);
  }
};

// The allowed ids of one bitmask row, stop ids last resort: the walk keeps
// going while the grammar can, as an ignore_eos decode does.
std::int32_t pick(std::span<const std::uint32_t> row, const std::vector<std::int32_t>& stops,
                  Rng& rng, std::vector<std::int32_t>& scratch) {
  scratch.clear();
  std::int32_t stop = -1;
  for (std::size_t w = 0; w < row.size(); ++w) {
    for (std::uint32_t bits = row[w]; bits != 0; bits &= bits - 1) {
      const auto id =
          static_cast<std::int32_t>(w * 32 + static_cast<std::size_t>(__builtin_ctz(bits)));
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        stop = id;
      } else {
        scratch.push_back(id);
      }
    }
  }
  if (scratch.empty()) return stop;
  return scratch[rng.next() % scratch.size()];
}

struct Timing {
  int threads = 0;
  std::vector<double> step_ms;  // per step: every row's job, submit to last done
  int steps = 0;
};

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// One walk of `steps` steps at `threads` threads; the same seed gives the
// same tokens at every thread count. `reference` (the one-thread run's masks,
// [steps][batch * words]) is recorded when empty, else checked.
Timing walk(grammar::GrammarCompiler& compiler, const grammar::Constraint& c,
            const GrammarBenchArgs& a, int threads,
            std::vector<std::vector<std::uint32_t>>& reference) {
  const auto batch = static_cast<std::size_t>(a.batch);
  const std::vector<std::int32_t>& stops = compiler.stop_token_ids();
  std::vector<std::shared_ptr<grammar::GrammarState>> states;
  std::vector<std::vector<std::int32_t>> outputs(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    auto m = compiler.make_matcher(c);
    if (!m.ok()) fail(m.status().to_string());
    states.push_back(std::make_shared<grammar::GrammarState>(std::move(m).value()));
    outputs[i].reserve(static_cast<std::size_t>(a.steps));
  }
  auto ended = [&](std::size_t i) {
    return !outputs[i].empty() &&
           std::find(stops.begin(), stops.end(), outputs[i].back()) != stops.end();
  };
  grammar::MaskWorkers workers(threads);
  Rng rng{a.seed};
  std::vector<std::int32_t> scratch;
  std::vector<std::uint32_t> masks;
  const bool record = reference.empty();
  Timing t;
  t.threads = threads;
  for (int step = 0; step < a.steps; ++step) {
    const double t0 = now_seconds();
    int live = 0;
    for (std::size_t i = 0; i < batch; ++i) {
      if (ended(i)) continue;  // the grammar ended this row (as the engine ends the request)
      workers.submit(*states[i], outputs[i]);
      ++live;
    }
    if (live == 0) break;
    for (;;) {
      const std::uint64_t seen = workers.completions();
      if (std::none_of(states.begin(), states.end(), [](const auto& g) { return g->busy.load(); }))
        break;
      workers.wait_for_completion(seen, std::chrono::microseconds(20));
    }
    t.step_ms.push_back((now_seconds() - t0) * 1e3);
    masks.clear();
    for (std::size_t i = 0; i < batch; ++i) {
      if (states[i]->rejected) {
        fail(fmt::format("step {} row {}: the grammar refused a token its mask allowed", step, i));
      }
      masks.insert(masks.end(), states[i]->mask.begin(), states[i]->mask.end());
    }
    if (record) {
      reference.push_back(masks);
    } else if (static_cast<std::size_t>(step) >= reference.size() ||
               reference[static_cast<std::size_t>(step)] != masks) {
      fail(fmt::format("step {}: the masks of {} threads differ from one thread's", step, threads));
    }
    for (std::size_t i = 0; i < batch; ++i) {
      if (!ended(i)) outputs[i].push_back(pick(states[i]->mask, stops, rng, scratch));
    }
    ++t.steps;
  }
  return t;
}

void run(const GrammarBenchArgs& a) {
  if (a.batch < 1 || a.steps < 1) fail("--batch and --steps must be >= 1");
  for (int n : a.threads) {
    if (n < 1) fail("--threads takes counts >= 1");
  }
  const std::filesystem::path dir(a.model);
  auto config = model::load_model_config(dir);
  if (!config.ok()) fail(config.status().to_string());
  auto tok = tokenizer::Tokenizer::from_file(dir / "tokenizer.json");
  if (!tok.ok()) fail(tok.status().to_string());
  std::vector<std::int32_t> stops;
  auto gen = model::load_generation_config(dir);
  const auto& eos = gen.ok() && !gen.value().eos_token_ids.empty() ? gen.value().eos_token_ids
                                                                   : config.value().eos_token_ids;
  for (int id : eos) stops.push_back(id);
  grammar::GrammarCompiler compiler(grammar::VocabularySource{
      .tokenizer = std::make_shared<const tokenizer::Tokenizer>(std::move(tok).value()),
      .tokenizer_json = dir / "tokenizer.json",
      .vocab_size = config.value().vocab_size,
      .stop_token_ids = stops});
  std::ifstream file(a.json_schema_path);
  if (!file) fail(fmt::format("cannot read --json-schema {}", a.json_schema_path));
  std::stringstream text;
  text << file.rdbuf();
  const grammar::Constraint c{grammar::ConstraintKind::json_schema, text.str(), true};
  const double c0 = now_seconds();
  if (auto g = compiler.compile(c); !g.ok()) fail(g.status().to_string());
  const double compile_ms = (now_seconds() - c0) * 1e3;

  // The one-thread walk first: it records the masks every other count must equal.
  std::vector<std::vector<std::uint32_t>> reference;
  std::vector<Timing> timings;
  timings.push_back(walk(compiler, c, a, 1, reference));
  for (int n : a.threads) {
    if (n != 1) timings.push_back(walk(compiler, c, a, n, reference));
  }

  fmt::print("vpod bench grammar: {} ({} ids), schema {}, batch {}, {} steps, host {} threads\n",
             a.model, compiler.vocab_size(), a.json_schema_path, a.batch, timings[0].steps,
             std::thread::hardware_concurrency());
  fmt::print("compile (first, uncached): {:.1f} ms\n", compile_ms);
  fmt::print("one thread: {:.1f} us per row (accept + fill), mean\n",
             mean(timings[0].step_ms) * 1e3 / a.batch);
  fmt::print("| threads | jobs ms/step, mean | p50 | p99 | max | speedup over 1 |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const Timing& t : timings) {
    const double m = mean(t.step_ms);
    fmt::print("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.2f} |\n", t.threads, m,
               percentile(t.step_ms, 0.5), percentile(t.step_ms, 0.99), percentile(t.step_ms, 1.0),
               mean(timings[0].step_ms) / m);
    rows.push_back({{"threads", t.threads},
                    {"step_ms_mean", m},
                    {"step_ms_p50", percentile(t.step_ms, 0.5)},
                    {"step_ms_p99", percentile(t.step_ms, 0.99)},
                    {"step_ms_max", percentile(t.step_ms, 1.0)}});
  }
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    out << nlohmann::json{{"model", a.model},         {"json_schema", a.json_schema_path},
                          {"batch", a.batch},         {"steps", timings[0].steps},
                          {"compile_ms", compile_ms}, {"rows", rows}}
               .dump(2)
        << "\n";
  }
}

}  // namespace

void add_grammar_bench(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "grammar", "Structured output's CPU work per step: bitmask fill and accept (no GPU)");
  auto a = std::make_shared<GrammarBenchArgs>();
  cmd->add_option("--model", a->model, "Hugging Face model folder (its tokenizer and config)")
      ->required();
  cmd->add_option("--json-schema", a->json_schema_path, "The JSON Schema every row follows")
      ->required();
  cmd->add_option("--batch", a->batch, "Constrained rows per step")->capture_default_str();
  cmd->add_option("--steps", a->steps, "Steps (tokens per row)")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Fill thread counts to time (1 always runs)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the walk")->capture_default_str();
  cmd->add_option("--json", a->json_path, "Write the result as JSON");
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::bench
