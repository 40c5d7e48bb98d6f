// A deterministic double of ServingBackend for the HTTP server's tests: a
// byte tokenizer, a trivial chat template, and an "engine" thread that emits
// one token per sequence every step. What it generates is a pure function of
// (prompt, seed, position), so tests can predict outputs exactly. The real
// engine is exercised by the end-to-end suite (tests/e2e).
//
// Vocabulary: 0 <pad>, 1 <s> (BOS), 2 </s> (EOS), 3 + b for byte b.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

  // The byte a sequence emits at `position`: printable, from (prompt, seed).
  static char output_byte(const std::vector<std::int32_t>& prompt, std::uint64_t seed,
                          int position) {
    std::uint64_t h = 1469598103934665603ULL ^ seed;
    for (std::int32_t t : prompt) h = (h ^ static_cast<std::uint64_t>(t)) * 1099511628211ULL;
    h = (h ^ static_cast<std::uint64_t>(position)) * 1099511628211ULL;
    h ^= h >> 29;
    return static_cast<char>('a' + h % 26);
  }

  void set_ready(bool ready) { ready_ = ready; }
  int num_submitted() const { return num_submitted_.load(); }

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
  Result<std::string> apply_chat_template(std::span<const ChatMessage> messages,
                                          const ChatTemplateOptions& options) const override {
    std::string text;
    for (const ChatMessage& m : messages) {
      if (m.content.find("REJECT") != std::string::npos) {
        return invalid_argument("chat template: the conversation was rejected");
      }
      text += "<|" + m.role + "|>" + m.content + "\n";
    }
    if (options.add_generation_prompt) text += "<|assistant|>";
    return text;
  }

  Result<std::unique_ptr<GenerationStream>> submit(GenerationSpec spec,
                                                   std::function<void()> wake) override {
    if (spec.prompt_token_ids.empty()) return invalid_argument("empty prompt");
    auto seq = std::make_shared<Sequence>();
    seq->spec = std::move(spec);
    seq->wake = std::move(wake);
    // No seed: an arbitrary one, as an engine draws.
    seq->seed = seq->spec.sampling.seed.value_or(next_seed_++);
    if (seq->spec.sampling.temperature == 0.0f) seq->seed = 0;  // greedy ignores seeds
    {
      std::lock_guard lock(mutex_);
      active_.push_back(seq);
    }
    ++num_submitted_;
    cv_.notify_all();
    return std::unique_ptr<GenerationStream>(new Stream(seq, this));
  }

  EngineStats stats() const override {
    std::lock_guard lock(mutex_);
    EngineStats s;
    s.num_running = static_cast<int>(active_.size());
    std::int64_t tokens = 0;
    for (const auto& seq : active_) {
      tokens += static_cast<std::int64_t>(seq->spec.prompt_token_ids.size()) + seq->generated;
    }
    s.kv_cache_usage = static_cast<double>(tokens) / kCapacityTokens;
    return s;
  }

 private:
  static constexpr double kCapacityTokens = 1 << 20;

  struct Sequence {
    GenerationSpec spec;
    std::function<void()> wake;
    std::uint64_t seed = 0;
    int generated = 0;
    std::string text;      // generated so far (before stop handling)
    std::size_t sent = 0;  // text already released
    std::atomic<bool> abort_requested{false};
    std::mutex mutex;  // guards pending/has_pending
    GenerationDelta pending;
    bool has_pending = false;
  };

  class Stream : public GenerationStream {
   public:
    Stream(std::shared_ptr<Sequence> seq, ScriptedBackend* backend)
        : seq_(std::move(seq)), backend_(backend) {}
    bool try_pop(GenerationDelta& out) override {
      std::lock_guard lock(seq_->mutex);
      if (!seq_->has_pending) return false;
      out = std::move(seq_->pending);
      seq_->pending = GenerationDelta();
      seq_->has_pending = false;
      return true;
    }
    void abort() override {
      seq_->abort_requested = true;
      backend_->cv_.notify_all();
    }

   private:
    std::shared_ptr<Sequence> seq_;
    ScriptedBackend* backend_;
  };

  static void push(Sequence& seq, GenerationDelta&& delta) {
    {
      std::lock_guard lock(seq.mutex);
      if (seq.has_pending) {
        seq.pending.merge(std::move(delta));
      } else {
        seq.pending = std::move(delta);
        seq.has_pending = true;
      }
    }
    seq.wake();
  }

  // One step for one sequence; true when it finished.
  static bool step_one(Sequence& seq) {
    const SamplingOptions& s = seq.spec.sampling;
    GenerationDelta d;
    d.num_prompt_tokens = static_cast<int>(seq.spec.prompt_token_ids.size());
    if (seq.abort_requested) {
      d.finished = true;
      d.finish_reason = FinishReason::abort;
      d.num_generated_tokens = seq.generated;
      push(seq, std::move(d));
      return true;
    }
    const std::string prompt_text = [&] {
      std::string t;
      for (std::int32_t id : seq.spec.prompt_token_ids) {
        if (id >= kByteBase) t += static_cast<char>(id - kByteBase);
      }
      return t;
    }();
    if (prompt_text.find("FAIL") != std::string::npos) {
      d.finished = true;
      d.finish_reason = FinishReason::error;
      d.error = "scripted failure";
      push(seq, std::move(d));
      return true;
    }
    // Prompts containing "EOS" end with EOS after 3 tokens (unless ignore_eos).
    const bool eos = prompt_text.find("EOS") != std::string::npos && seq.generated == 3 &&
                     !s.ignore_eos && seq.generated >= s.min_tokens;
    std::int32_t token;
    if (eos) {
      token = kEos;
    } else {
      token = kByteBase + static_cast<unsigned char>(
                              output_byte(seq.spec.prompt_token_ids, seq.seed, seq.generated));
    }
    ++seq.generated;
    d.token_ids.push_back(token);
    if (s.logprobs) {
      TokenLogprobs l{token, -0.125f * static_cast<float>(1 + seq.generated % 4), {}};
      for (int k = 0; k < *s.logprobs; ++k) {
        l.top.push_back({kByteBase + 'a' + k, -0.1f * static_cast<float>(k + 1)});
      }
      d.logprobs.push_back(std::move(l));
    }
    d.num_generated_tokens = seq.generated;
    bool stop_token = false;
    for (std::int32_t id : s.stop_token_ids) stop_token = stop_token || id == token;
    if (eos || (stop_token && seq.generated >= s.min_tokens)) {
      d.finished = true;
      d.finish_reason = FinishReason::stop;
      if (stop_token && !eos) d.stop_token = token;
    } else {
      seq.text += static_cast<char>(token - kByteBase);
      // Stop strings: cut at the first match; hold back a possible prefix.
      std::size_t hold = 0;
      for (const std::string& stop : s.stop) {
        const std::size_t at = seq.text.find(stop, seq.sent);
        if (at != std::string::npos && seq.generated >= s.min_tokens) {
          const std::size_t end = s.include_stop_str_in_output ? at + stop.size() : at;
          d.text = seq.text.substr(seq.sent, end - seq.sent);
          seq.sent = end;
          d.finished = true;
          d.finish_reason = FinishReason::stop;
          d.stop_string = stop;
          push(seq, std::move(d));
          return true;
        }
        for (std::size_t k = std::min(stop.size() - 1, seq.text.size() - seq.sent); k > 0; --k) {
          if (seq.text.compare(seq.text.size() - k, k, stop, 0, k) == 0) {
            hold = std::max(hold, k);
            break;
          }
        }
      }
      const std::size_t release = seq.text.size() - hold;
      d.text = seq.text.substr(seq.sent, release - seq.sent);
      seq.sent = release;
      if (seq.generated >= s.max_tokens) {
        d.text += seq.text.substr(seq.sent);
        seq.sent = seq.text.size();
        d.finished = true;
        d.finish_reason = FinishReason::length;
      }
    }
    const bool done = d.finished;
    push(seq, std::move(d));
    return done;
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
    }
  }

  const std::chrono::milliseconds step_;
  ModelCard card_;
  std::atomic<bool> ready_{true};
  std::atomic<int> num_submitted_{0};
  std::atomic<std::uint64_t> next_seed_{12345};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<Sequence>> active_;
  bool stop_ = false;
  std::thread engine_;
};

}  // namespace vpod::server::testing
