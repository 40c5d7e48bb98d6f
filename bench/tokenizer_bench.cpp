// `vpod bench tokenizer --tokenizer DIR`: tokenizer.json load time, encode
// throughput (MB/s of English on one core, first pass with an empty word cache
// and a second, warm pass), decode and streaming-detokenizer throughput. It
// validates first: the corpus must decode back to itself.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/benches.h"
#include "common/splitmix64.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vpod::bench {
namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

struct TokenizerBenchArgs {
  std::string tokenizer_path;
  double megabytes = 4.0;
  int loads = 5;
  std::uint64_t seed = 1;
  std::string json_path;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of this thread: on a shared machine wall time includes waiting.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// SplitMix64: a fixed, portable sequence (std distributions are not).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    state += kSplitMix64Gamma;
    return splitmix64_finalize(state);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

// English-like prose: Zipf-ish word choice from a fixed list, sentences with
// commas, contractions, numbers, quotes and paragraphs.
std::string english_corpus(std::size_t bytes, std::uint64_t seed) {
  static const char* const kWords[] = {"the",
                                       "of",
                                       "and",
                                       "to",
                                       "a",
                                       "in",
                                       "is",
                                       "it",
                                       "you",
                                       "that",
                                       "he",
                                       "was",
                                       "for",
                                       "on",
                                       "are",
                                       "with",
                                       "as",
                                       "I",
                                       "his",
                                       "they",
                                       "be",
                                       "at",
                                       "one",
                                       "have",
                                       "this",
                                       "from",
                                       "or",
                                       "had",
                                       "by",
                                       "hot",
                                       "word",
                                       "but",
                                       "what",
                                       "some",
                                       "we",
                                       "can",
                                       "out",
                                       "other",
                                       "were",
                                       "all",
                                       "there",
                                       "when",
                                       "up",
                                       "use",
                                       "your",
                                       "how",
                                       "said",
                                       "an",
                                       "each",
                                       "she",
                                       "which",
                                       "do",
                                       "their",
                                       "time",
                                       "if",
                                       "will",
                                       "way",
                                       "about",
                                       "many",
                                       "then",
                                       "them",
                                       "write",
                                       "would",
                                       "like",
                                       "so",
                                       "these",
                                       "her",
                                       "long",
                                       "make",
                                       "thing",
                                       "see",
                                       "him",
                                       "two",
                                       "has",
                                       "look",
                                       "more",
                                       "day",
                                       "could",
                                       "go",
                                       "come",
                                       "did",
                                       "number",
                                       "sound",
                                       "no",
                                       "most",
                                       "people",
                                       "my",
                                       "over",
                                       "know",
                                       "water",
                                       "than",
                                       "call",
                                       "first",
                                       "who",
                                       "may",
                                       "down",
                                       "side",
                                       "been",
                                       "now",
                                       "find",
                                       "any",
                                       "new",
                                       "work",
                                       "part",
                                       "take",
                                       "get",
                                       "place",
                                       "made",
                                       "live",
                                       "where",
                                       "after",
                                       "back",
                                       "little",
                                       "only",
                                       "round",
                                       "man",
                                       "year",
                                       "came",
                                       "show",
                                       "every",
                                       "good",
                                       "me",
                                       "give",
                                       "our",
                                       "under",
                                       "name",
                                       "very",
                                       "through",
                                       "just",
                                       "form",
                                       "sentence",
                                       "great",
                                       "think",
                                       "say",
                                       "help",
                                       "low",
                                       "line",
                                       "differ",
                                       "turn",
                                       "cause",
                                       "much",
                                       "mean",
                                       "before",
                                       "move",
                                       "right",
                                       "boy",
                                       "old",
                                       "too",
                                       "same",
                                       "tell",
                                       "does",
                                       "set",
                                       "three",
                                       "want",
                                       "air",
                                       "well",
                                       "also",
                                       "play",
                                       "small",
                                       "end",
                                       "put",
                                       "home",
                                       "read",
                                       "hand",
                                       "port",
                                       "large",
                                       "spell",
                                       "add",
                                       "even",
                                       "land",
                                       "here",
                                       "must",
                                       "big",
                                       "high",
                                       "such",
                                       "follow",
                                       "act",
                                       "why",
                                       "ask",
                                       "men",
                                       "change",
                                       "went",
                                       "light",
                                       "kind",
                                       "off",
                                       "need",
                                       "house",
                                       "picture",
                                       "try",
                                       "us",
                                       "again",
                                       "animal",
                                       "point",
                                       "mother",
                                       "world",
                                       "near",
                                       "build",
                                       "self",
                                       "earth",
                                       "father",
                                       "government",
                                       "information",
                                       "development",
                                       "understanding",
                                       "responsibility",
                                       "international",
                                       "environmental",
                                       "characteristics",
                                       "infrastructure",
                                       "approximately",
                                       "nevertheless",
                                       "photosynthesis",
                                       "electromagnetic",
                                       "unquestionably",
                                       "tokenization"};
  static const char* const kContractions[] = {"it's",   "don't", "we're", "they've", "I'm",
                                              "you'll", "she'd", "can't", "won't",   "isn't"};
  constexpr std::size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  Rng rng{seed};
  std::string text;
  text.reserve(bytes + 256);
  while (text.size() < bytes) {
    const std::size_t sentences = 2 + rng.below(6);
    for (std::size_t s = 0; s < sentences; ++s) {
      const std::size_t words = 5 + rng.below(20);
      for (std::size_t w = 0; w < words; ++w) {
        std::string word;
        const std::size_t r = rng.below(100);
        if (r < 4) {
          word = kContractions[rng.below(std::size(kContractions))];
        } else if (r < 6) {
          word = std::to_string(rng.below(r < 5 ? 100 : 100000));
        } else {
          // Squaring a uniform draw favours the frequent words at the front.
          const std::size_t u = rng.below(kNumWords);
          word = kWords[(u * u) / kNumWords];
        }
        if (w == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 32);
        if (w > 0) text += ' ';
        if (rng.below(50) == 0) {
          text += '"' + word + '"';
        } else {
          text += word;
        }
        if (w + 1 < words && rng.below(12) == 0) text += ',';
      }
      text += rng.below(10) == 0 ? "?" : ".";
      if (s + 1 < sentences) text += ' ';
    }
    text += "\n\n";
  }
  return text;
}

// The corpus cut into prompt-sized pieces at paragraph ends.
std::vector<std::string_view> chunks_of(const std::string& text, std::size_t target) {
  std::vector<std::string_view> chunks;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find("\n\n", std::min(text.size(), start + target));
    end = end == std::string::npos ? text.size() : end + 2;
    chunks.emplace_back(text.data() + start, end - start);
    start = end;
  }
  return chunks;
}

struct Row {
  std::string name;
  double value;
  std::string unit;
  std::string note;
};

void run_tokenizer_bench(const TokenizerBenchArgs& args) {
  // 1. Load time.
  std::vector<double> wall_ms, cpu_ms;
  std::optional<Tokenizer> tok;
  for (int i = 0; i < std::max(1, args.loads); ++i) {
    const double w0 = now_seconds(), c0 = thread_cpu_seconds();
    auto loaded = Tokenizer::from_file(args.tokenizer_path);
    const double w1 = now_seconds(), c1 = thread_cpu_seconds();
    if (!loaded.ok()) {
      fmt::print(stderr, "bench tokenizer: {}\n", loaded.status().to_string());
      throw CLI::RuntimeError(2);
    }
    wall_ms.push_back((w1 - w0) * 1e3);
    cpu_ms.push_back((c1 - c0) * 1e3);
    tok.emplace(std::move(loaded).value());  // the last load is measured below, cache empty
  }
  std::sort(wall_ms.begin(), wall_ms.end());
  std::sort(cpu_ms.begin(), cpu_ms.end());

  // 2. Validate: the corpus round-trips.
  const std::string corpus =
      english_corpus(static_cast<std::size_t>(args.megabytes * 1e6), args.seed);
  const std::vector<std::string_view> chunks = chunks_of(corpus, 2048);
  {
    const std::string_view sample = chunks.front();
    auto ids = tok->encode(sample, false);
    if (!ids.ok()) {
      fmt::print(stderr, "bench tokenizer: encode failed: {}\n", ids.status().to_string());
      throw CLI::RuntimeError(1);
    }
    auto text = tok->decode(*ids, false);
    if (!text.ok() || *text != sample) {
      fmt::print(stderr, "bench tokenizer: validation failed: decode(encode(x)) != x\n");
      throw CLI::RuntimeError(1);
    }
  }

  // 3. Encode: a first pass (the word cache fills as it goes), then a warm one.
  std::vector<TokenId> ids;
  std::vector<TokenId> all_ids;
  std::size_t num_tokens = 0;
  double pass_wall[2], pass_cpu[2];
  for (int pass = 0; pass < 2; ++pass) {
    num_tokens = 0;
    const double w0 = now_seconds(), c0 = thread_cpu_seconds();
    for (const std::string_view chunk : chunks) {
      const Status s = tok->encode_into(chunk, false, ids);
      if (!s.ok()) {
        fmt::print(stderr, "bench tokenizer: {}\n", s.to_string());
        throw CLI::RuntimeError(1);
      }
      num_tokens += ids.size();
      if (pass == 1 && all_ids.size() < 1'000'000)
        all_ids.insert(all_ids.end(), ids.begin(), ids.end());
    }
    pass_wall[pass] = now_seconds() - w0;
    pass_cpu[pass] = thread_cpu_seconds() - c0;
  }
  const double mb = static_cast<double>(corpus.size()) / 1e6;

  // 4. Decode and stream-detokenize the tokens of the warm pass.
  const double d0 = thread_cpu_seconds();
  auto decoded = tok->decode(all_ids, false);
  const double decode_cpu = thread_cpu_seconds() - d0;
  if (!decoded.ok()) throw CLI::RuntimeError(1);
  const double s0 = thread_cpu_seconds();
  tokenizer::IncrementalDetokenizer stream(*tok, false);
  std::string streamed;
  for (const TokenId id : all_ids) {
    auto delta = stream.feed(id);
    if (!delta.ok()) throw CLI::RuntimeError(1);
    streamed += *delta;
  }
  streamed += stream.finish().value();
  const double stream_cpu = thread_cpu_seconds() - s0;
  if (streamed != *decoded) {
    fmt::print(stderr, "bench tokenizer: streamed text differs from decode\n");
    throw CLI::RuntimeError(1);
  }

  const std::vector<Row> rows = {
      {"load (min wall)", wall_ms.front(), "ms", fmt::format("{} loads", wall_ms.size())},
      {"load (median wall)", wall_ms[wall_ms.size() / 2], "ms", ""},
      {"load (min thread CPU)", cpu_ms.front(), "ms", ""},
      {"encode, first pass", mb / pass_wall[0], "MB/s",
       fmt::format("{:.2f} MB/s CPU", mb / pass_cpu[0])},
      {"encode, warm cache", mb / pass_wall[1], "MB/s",
       fmt::format("{:.2f} MB/s CPU", mb / pass_cpu[1])},
      {"encode, warm cache", static_cast<double>(num_tokens) / pass_wall[1] / 1e6, "Mtok/s",
       fmt::format("{} tokens, {:.2f} bytes/token", num_tokens,
                   static_cast<double>(corpus.size()) / static_cast<double>(num_tokens))},
      {"decode", static_cast<double>(all_ids.size()) / decode_cpu / 1e6, "Mtok/s CPU", ""},
      {"stream detokenize", static_cast<double>(all_ids.size()) / stream_cpu / 1e6, "Mtok/s CPU",
       "one id at a time"},
  };
  fmt::print("tokenizer bench: {} ({:.1f} MB English-like text, seed {}, one thread)\n",
             args.tokenizer_path, mb, args.seed);
  fmt::print("{:<24} {:>10}  {:<11} {}\n", "metric", "value", "unit", "note");
  for (const Row& r : rows) {
    fmt::print("{:<24} {:>10.2f}  {:<11} {}\n", r.name, r.value, r.unit, r.note);
  }
  if (!args.json_path.empty()) {
    nlohmann::json out;
    out["tokenizer"] = args.tokenizer_path;
    out["corpus_bytes"] = corpus.size();
    out["corpus_tokens"] = num_tokens;
    out["load_ms_min_wall"] = wall_ms.front();
    out["load_ms_median_wall"] = wall_ms[wall_ms.size() / 2];
    out["load_ms_min_cpu"] = cpu_ms.front();
    out["encode_mb_per_s_first_pass"] = mb / pass_wall[0];
    out["encode_mb_per_s_warm"] = mb / pass_wall[1];
    out["encode_mb_per_s_warm_cpu"] = mb / pass_cpu[1];
    out["decode_mtok_per_s_cpu"] = static_cast<double>(all_ids.size()) / decode_cpu / 1e6;
    out["stream_mtok_per_s_cpu"] = static_cast<double>(all_ids.size()) / stream_cpu / 1e6;
    std::ofstream(args.json_path) << out.dump(2) << "\n";
  }
}

}  // namespace

void add_tokenizer_bench(CLI::App& bench) {
  auto args = std::make_shared<TokenizerBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "tokenizer", "tokenizer.json load time, encode MB/s, decode and streaming throughput");
  cmd->add_option("--tokenizer", args->tokenizer_path,
                  "tokenizer.json or a directory holding one (e.g. "
                  "../shared/fixtures/tokenizers/llama3)")
      ->required();
  cmd->add_option("--mb", args->megabytes, "size of the generated English corpus, MB")
      ->capture_default_str();
  cmd->add_option("--loads", args->loads, "number of timed loads")->capture_default_str();
  cmd->add_option("--seed", args->seed, "corpus seed")->capture_default_str();
  cmd->add_option("--json", args->json_path, "also write the results as JSON to this file");
  cmd->callback([args] { run_tokenizer_bench(*args); });
}

}  // namespace vpod::bench
