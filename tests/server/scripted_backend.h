// A deterministic double of ServingBackend for the HTTP server's tests: a
// byte tokenizer, a trivial chat template, and an "engine" thread that emits
// one token per sequence every step through real engine::RequestStreams and
// records real engine::EngineMetrics. What it generates is a pure function
// of (prompt, seed, position), so tests predict outputs exactly. The real
// engine is exercised by the end-to-end suite (tests/e2e).
//
// Prefix caching, as a store would report it: a prompt's cached tokens are
// its longest common prefix with an earlier prompt of the same cache_salt,
// in whole 4-token blocks, always short of the whole prompt.
//
// Vocabulary: 0 <pad>, 1 <s> (BOS), 2 </s> (EOS), 3 + b for byte b.
// Prompts containing "FAIL" fail; prompts containing "EOS" stop with EOS
// after 3 tokens.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/metrics.h"
#include "engine/output_stream.h"
#include "server/backend.h"

namespace vpod::server::testing {

class ScriptedBackend : public ServingBackend {
 public:
  static constexpr std::int32_t kBos = 1;
  static constexpr std::int32_t kEos = 2;
  static constexpr std::int32_t kByteBase = 3;

  explicit ScriptedBackend(std::chrono::milliseconds step = std::chrono::milliseconds(2))
      : step_(step) {
    card_.id = "scripted";
    card_.root = "/models/scripted";
    card_.created = 1700000000;
    card_.max_model_len = 512;
    card_.vocab_size = 259;
    engine_ = std::thread([this] { run(); });
  }
  ~ScriptedBackend() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    engine_.join();
  }

  // The byte a sequence emits at `position`: a letter, from (prompt, seed).
  static char output_byte(const std::vector<std::int32_t>& prompt, std::uint64_t seed,
                          int position) {
    std::uint64_t h = 1469598103934665603ULL ^ seed;
    for (std::int32_t t : prompt) h = (h ^ static_cast<std::uint64_t>(t)) * 1099511628211ULL;
    h = (h ^ static_cast<std::uint64_t>(position)) * 1099511628211ULL;
    h ^= h >> 29;
    return static_cast<char>('a' + h % 26);
  }

  void set_ready(bool ready) { ready_ = ready; }
  // The card, to change before the server is attached (served names, limits,
  // sampling defaults).
  ModelCard& card() { return card_; }
  // Sequences in the "engine" (what a real one's KV cache would hold).
  int num_running() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(active_.size());
  }

  const ModelCard& model() const override { return card_; }
  bool ready() const override { return ready_.load(); }

  Result<std::vector<std::int32_t>> tokenize(std::string_view text,
                                             bool add_special_tokens) const override {
    std::vector<std::int32_t> ids;
    if (add_special_tokens) ids.push_back(kBos);
    for (char c : text) ids.push_back(kByteBase + static_cast<unsigned char>(c));
    return ids;
  }
  Result<std::string> detokenize(std::span<const std::int32_t> ids,
                                 bool skip_special_tokens) const override {
    std::string text;
    for (std::int32_t id : ids) {
      if (id >= kByteBase || !skip_special_tokens) text += token_bytes(id);
    }
    return text;
  }
  std::string token_bytes(std::int32_t id) const override {
    if (id == 0) return "<pad>";
    if (id == kBos) return "<s>";
    if (id == kEos) return "</s>";
    return std::string(1, static_cast<char>(id - kByteBase));
  }
  // "<|role|>content\n" per message (text parts joined by "\n").
  Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages,
                                          const ChatTemplateOptions& options) const override {
    std::string text;
    for (const auto& m : messages) {
      std::string content;
      if (m["content"].is_string()) {
        content = m["content"].get<std::string>();
      } else {
        for (const auto& part : m["content"]) {
          if (!content.empty()) content += "\n";
          content += part["text"].get<std::string>();
        }
      }
      if (content.find("REJECT") != std::string::npos) {
        return invalid_argument("chat template: the conversation was rejected");
      }
      text += "<|" + m["role"].get<std::string>() + "|>" + content + "\n";
    }
    if (options.add_generation_prompt) text += "<|assistant|>";
    return text;
  }

  Result<std::unique_ptr<GenerationStream>> submit(engine::RequestSpec spec,
                                                   std::function<void()> wake) override {
    if (spec.prompt_token_ids.empty()) return invalid_argument("empty prompt");
    VPOD_RETURN_IF_ERROR(engine::validate(spec.sampling));
    VPOD_RETURN_IF_ERROR(engine::validate(spec.stop));
    auto seq = std::make_shared<Sequence>();
    seq->stream = std::make_shared<engine::RequestStream>(
        ++next_id_, spec.stop.max_tokens, spec.sampling.logprobs.has_value(), 0, std::move(wake));
    seq->spec = std::move(spec);
    // No seed: an arbitrary one, as an engine draws.
    seq->seed = seq->spec.sampling.seed.value_or(next_seed_++);
    if (seq->spec.sampling.greedy()) seq->seed = 0;  // greedy ignores seeds
    {
      std::lock_guard lock(mutex_);
      seq->cached = cached_tokens(seq->spec);
      seen_.emplace_back(seq->spec.cache_salt, seq->spec.prompt_token_ids);
      active_.push_back(seq);
      metrics_.prompt_tokens += seq->spec.prompt_token_ids.size();
      update_gauges();
    }
    cv_.notify_all();
    return std::unique_ptr<GenerationStream>(new Stream(seq, this));
  }

  engine::MetricsSnapshot metrics() const override { return metrics_.snapshot(); }

 private:
  static constexpr double kCapacityTokens = 1 << 20;

  static constexpr int kCacheBlock = 4;

  struct Sequence {
    engine::RequestSpec spec;
    std::shared_ptr<engine::RequestStream> stream;
    std::uint64_t seed = 0;
    int cached = 0;  // prompt tokens "found in the prefix cache"
    int generated = 0;
    std::string text;      // generated so far (before stop handling)
    std::size_t sent = 0;  // text already released
    std::atomic<bool> abort_requested{false};
  };

  class Stream : public GenerationStream {
   public:
    Stream(std::shared_ptr<Sequence> seq, ScriptedBackend* backend)
        : seq_(std::move(seq)), backend_(backend) {}
    bool try_pop(engine::RequestOutput& out) override { return seq_->stream->try_pop(out); }
    void abort() override {
      seq_->abort_requested = true;
      backend_->cv_.notify_all();
    }

   private:
    std::shared_ptr<Sequence> seq_;
    ScriptedBackend* backend_;
  };

  // Caller holds mutex_.
  int cached_tokens(const engine::RequestSpec& spec) const {
    const std::vector<std::int32_t>& p = spec.prompt_token_ids;
    std::size_t best = 0;
    for (const auto& [salt, seen] : seen_) {
      if (salt != spec.cache_salt) continue;
      std::size_t n = 0;
      while (n < p.size() && n < seen.size() && p[n] == seen[n]) ++n;
      best = std::max(best, n);
    }
    best = std::min(best, p.size() - 1);
    return static_cast<int>(best / kCacheBlock * kCacheBlock);
  }

  // One step for one sequence; true when it finished. Caller holds mutex_.
  bool step_one(Sequence& seq) {
    const engine::SamplingParams& s = seq.spec.sampling;
    const engine::StopParams& stop = seq.spec.stop;
    engine::RequestOutput d;
    d.num_prompt_tokens = static_cast<int>(seq.spec.prompt_token_ids.size());
    d.num_cached_tokens = seq.cached;
    const auto end = [&](engine::FinishReason reason) {
      d.finished = true;
      d.finish_reason = reason;
      d.num_generated_tokens = seq.generated;
      metrics_.count_finished(reason);
      seq.stream->push(d);
      return true;
    };
    if (seq.abort_requested) return end(engine::FinishReason::abort);
    std::string prompt_text;
    for (std::int32_t id : seq.spec.prompt_token_ids) {
      if (id >= kByteBase) prompt_text += static_cast<char>(id - kByteBase);
    }
    if (prompt_text.find("FAIL") != std::string::npos) {
      d.error = "scripted failure";
      return end(engine::FinishReason::error);
    }
    const bool eos = prompt_text.find("EOS") != std::string::npos && seq.generated == 3 &&
                     !stop.ignore_eos && seq.generated >= stop.min_tokens;
    const std::int32_t token =
        eos ? kEos
            : kByteBase + static_cast<unsigned char>(
                              output_byte(seq.spec.prompt_token_ids, seq.seed, seq.generated));
    if (seq.generated == 0) metrics_.time_to_first_token_s.observe(0.001);
    ++seq.generated;
    ++metrics_.generation_tokens;
    d.token_ids.push_back(token);
    if (s.logprobs) {
      engine::SampledToken l;
      l.token = token;
      l.logprob = -0.125f * static_cast<float>(1 + seq.generated % 4);
      l.num_top = *s.logprobs;
      for (int k = 0; k < l.num_top; ++k) {
        l.top[k] = {kByteBase + 'a' + k, -0.1f * static_cast<float>(k + 1)};
      }
      d.logprobs.push_back(l);
    }
    d.num_generated_tokens = seq.generated;
    bool stop_token = false;
    for (std::int32_t id : stop.stop_token_ids) stop_token = stop_token || id == token;
    if (eos || (stop_token && seq.generated >= stop.min_tokens)) {
      d.stop_token = token;
      return end(engine::FinishReason::stop);
    }
    seq.text += static_cast<char>(token - kByteBase);
    // Stop strings: cut at the first match; hold back a possible prefix.
    std::size_t hold = 0;
    for (const std::string& x : stop.stop) {
      const std::size_t at = seq.text.find(x, seq.sent);
      if (at != std::string::npos && seq.generated >= stop.min_tokens) {
        const std::size_t cut = stop.include_stop_str_in_output ? at + x.size() : at;
        d.text = seq.text.substr(seq.sent, cut - seq.sent);
        seq.sent = cut;
        d.stop_string = x;
        return end(engine::FinishReason::stop);
      }
      for (std::size_t k = std::min(x.size() - 1, seq.text.size() - seq.sent); k > 0; --k) {
        if (seq.text.compare(seq.text.size() - k, k, x, 0, k) == 0) {
          hold = std::max(hold, k);
          break;
        }
      }
    }
    const bool last = seq.generated >= stop.max_tokens;
    if (last) hold = 0;
    const std::size_t release = seq.text.size() - hold;
    d.text = seq.text.substr(seq.sent, release - seq.sent);
    seq.sent = release;
    if (last) return end(engine::FinishReason::length);
    seq.stream->push(d);
    return false;
  }

  // The gauges a real engine keeps. Caller holds mutex_.
  void update_gauges() {
    metrics_.num_requests_running = static_cast<std::int64_t>(active_.size());
    std::int64_t tokens = 0;
    for (const auto& seq : active_) {
      tokens += static_cast<std::int64_t>(seq->spec.prompt_token_ids.size()) + seq->generated;
    }
    metrics_.kv_cache_usage_ratio = static_cast<double>(tokens) / kCapacityTokens;
  }

  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, step_, [&] { return stop_; });
      if (stop_) break;
      for (auto it = active_.begin(); it != active_.end();) {
        if (step_one(**it)) {
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      update_gauges();
    }
  }

  const std::chrono::milliseconds step_;
  ModelCard card_;
  std::atomic<bool> ready_{true};
  std::atomic<std::uint64_t> next_seed_{12345};
  std::atomic<engine::RequestId> next_id_{0};
  engine::EngineMetrics metrics_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<Sequence>> active_;
  // Every prompt submitted, with its cache_salt: the "prefix cache".
  std::vector<std::pair<std::string, std::vector<std::int32_t>>> seen_;
  bool stop_ = false;
  std::thread engine_;
};

}  // namespace vpod::server::testing
