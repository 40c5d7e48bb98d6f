// Deterministic test doubles of the engine's three borrowed interfaces.
//
// FakeKvCache (KvCapacity): counts fixed-size blocks per slot, like a paged
// cache; every reservation, growth and free is checked.
//
// HashModel (ModelExecutor): a model whose "KV cache" is the token ids it has
// been fed, per slot. A sequence must arrive with exactly the cached length
// the slot holds (no gap, nothing computed twice), and the next token is a
// hash of the slot's whole token history. So an output is identical to the
// same request run alone if and only if the scheduler fed every token once,
// in order, at the right position, in the right slot - including across
// preemption, where the slot is wiped and everything is recomputed.
//
// ByteDecoderFactory (DecoderFactory): each token id maps to a byte string;
// text is released only as complete UTF-8 characters, like a real byte-level
// incremental detokenizer.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/splitmix64.h"
#include "engine/model_executor.h"
#include "engine/text_decoder.h"
#include "kvcache/kv_capacity.h"

namespace vpod::engine::testing {

inline std::uint64_t mix64(std::uint64_t x) { return splitmix64(x); }

// The token history of every slot: what the fake model has "in its KV cache".
struct SlotMemory {
  std::vector<std::vector<std::int32_t>> tokens;  // [slot][position]
  void wipe(int slot) { tokens[slot].clear(); }
};

class FakeKvCache final : public kvcache::KvCapacity {
 public:
  FakeKvCache(int num_slots, int num_blocks, int block_tokens, int max_tokens_per_slot,
              SlotMemory* memory = nullptr)
      : num_blocks_(num_blocks),
        block_tokens_(block_tokens),
        max_tokens_per_slot_(max_tokens_per_slot),
        slot_blocks_(num_slots, -1),
        memory_(memory) {
    if (memory_) {
      memory_->tokens.assign(num_slots, {});
      for (auto& slot : memory_->tokens) slot.reserve(max_tokens_per_slot);
    }
  }

  int max_tokens_per_slot() const override { return max_tokens_per_slot_; }
  std::int64_t capacity_tokens() const override {
    return std::int64_t{num_blocks_} * block_tokens_;
  }
  bool can_allocate(int num_tokens, const kvcache::PrefixQuery& /*prefix*/) const override {
    return free_slot() >= 0 && num_tokens <= max_tokens_per_slot_ &&
           blocks_for(num_tokens) <= num_blocks_ - used_blocks_;
  }
  kvcache::Allocation allocate(int num_tokens, const kvcache::PrefixQuery& prefix) override {
    EXPECT_TRUE(can_allocate(num_tokens, prefix));
    const int slot = free_slot();
    slot_blocks_[slot] = blocks_for(num_tokens);
    used_blocks_ += slot_blocks_[slot];
    ++num_allocations;
    return {.slot = slot, .cached_tokens = 0};
  }
  bool grow(int slot, int num_tokens) override {
    EXPECT_GE(slot_blocks_.at(slot), 0) << "grow of a free slot";
    if (num_tokens > max_tokens_per_slot_) return false;
    const int extra = blocks_for(num_tokens) - slot_blocks_[slot];
    if (extra <= 0) return true;
    if (extra > num_blocks_ - used_blocks_) return false;
    slot_blocks_[slot] += extra;
    used_blocks_ += extra;
    return true;
  }
  void free(int slot) override {
    EXPECT_GE(slot_blocks_.at(slot), 0) << "double free of slot " << slot;
    used_blocks_ -= slot_blocks_[slot];
    slot_blocks_[slot] = -1;
    if (memory_) memory_->wipe(slot);
    ++num_frees;
  }
  Status prepare(const HybridBatch& batch) override {
    // Every sequence's tokens must be reserved before the forward runs.
    for (const auto* seqs : {&batch.prefills, &batch.decodes})
      for (const BatchSequence& s : *seqs) {
        EXPECT_GE(slot_blocks_.at(s.slot), 0) << "prepare of a free slot";
        EXPECT_LE(s.context_len(), slot_blocks_[s.slot] * block_tokens_)
            << "slot " << s.slot << " runs past its reservation";
      }
    ++num_prepares;
    return {};
  }
  double usage() const override { return double(used_blocks_) / num_blocks_; }

  int used_blocks() const { return used_blocks_; }
  int slots_in_use() const {
    int n = 0;
    for (int b : slot_blocks_) n += b >= 0;
    return n;
  }
  int num_allocations = 0;
  int num_frees = 0;
  int num_prepares = 0;

 private:
  int blocks_for(int tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
  int free_slot() const {
    for (std::size_t i = 0; i < slot_blocks_.size(); ++i)
      if (slot_blocks_[i] < 0) return static_cast<int>(i);
    return -1;
  }

  int num_blocks_;
  int block_tokens_;
  int max_tokens_per_slot_;
  std::vector<int> slot_blocks_;  // blocks reserved per slot; -1 = free
  int used_blocks_ = 0;
  SlotMemory* memory_;
};

class HashModel final : public ModelExecutor {
 public:
  HashModel(SlotMemory* memory, int vocab_size) : memory_(memory), vocab_size_(vocab_size) {}

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out) override {
    ++num_forwards;
    if (fail_at_forward == num_forwards) return internal_error("injected device failure");
    if (batch.decodes.empty()) {
      ++prefill_only_forwards;
    } else if (batch.prefills.empty()) {
      ++decode_only_forwards;
    } else {
      ++hybrid_forwards;
      hybrid_decodes += static_cast<long>(batch.decodes.size());
    }
    EXPECT_EQ(samples.size(), out.size());
    EXPECT_EQ(batch.token_ids.size(), batch.positions.size());
    // The flattened list: prefill chunks in order, then decodes.
    int offset = 0;
    for (const auto* seqs : {&batch.prefills, &batch.decodes}) {
      for (const BatchSequence& s : *seqs) {
        EXPECT_EQ(s.token_offset, offset);
        std::vector<std::int32_t>& mem = memory_->tokens.at(s.slot);
        // Exactly the cached tokens must be there: no gap, none computed twice.
        EXPECT_EQ(static_cast<int>(mem.size()), s.cached_len)
            << "slot " << s.slot << " holds " << mem.size() << " tokens, batch says "
            << s.cached_len;
        mem.resize(s.cached_len);
        for (int i = 0; i < s.num_new; ++i) {
          EXPECT_EQ(batch.positions[s.token_offset + i], s.cached_len + i);
          mem.push_back(batch.token_ids[s.token_offset + i]);
        }
        offset += s.num_new;
        tokens_computed += s.num_new;
      }
    }
    EXPECT_EQ(offset, static_cast<int>(batch.token_ids.size()));
    for (const BatchSequence& s : batch.decodes) EXPECT_EQ(s.num_new, 1);

    for (std::size_t i = 0; i < samples.size(); ++i) {
      const SampleSpec& spec = samples[i];
      const BatchSequence* seq = find_sequence(batch, spec.token_index);
      EXPECT_NE(seq, nullptr) << "sample row " << spec.token_index << " is no sequence's last";
      if (!seq) return internal_error("bad sample row");
      const std::vector<std::int32_t>& mem = memory_->tokens[seq->slot];
      // The model sees only its KV cache; it must agree with the request.
      EXPECT_EQ(mem.size(), spec.token_ids.size());
      std::uint64_t h = 0;
      for (std::int32_t t : mem) h = mix64(h ^ static_cast<std::uint64_t>(t));
      if (!spec.params->greedy()) h = mix64(h ^ mix64(spec.seed + spec.output_index));
      std::int32_t token = static_cast<std::int32_t>(h % vocab_size_);
      for (int tries = 0; tries < vocab_size_ && is_in(spec.suppressed_ids, token); ++tries)
        token = (token + 1) % vocab_size_;
      out[i] = SampledToken{};
      out[i].token = token;
      out[i].logprob = -static_cast<float>(token % 7) / 8.0f;
      if (spec.num_logprobs > 0) {
        out[i].num_top = spec.num_logprobs;
        for (int k = 0; k < spec.num_logprobs; ++k)
          out[i].top[k] = {static_cast<std::int32_t>((token + k) % vocab_size_),
                           -static_cast<float>(k) / 4.0f};
      }
    }
    return {};
  }

  int num_forwards = 0;
  int fail_at_forward = -1;  // 1-based forward call that fails
  long tokens_computed = 0;
  // By what the batch holds: prompt chunks only, decodes only, or both.
  int prefill_only_forwards = 0, decode_only_forwards = 0, hybrid_forwards = 0;
  long hybrid_decodes = 0;

 private:
  static bool is_in(std::span<const std::int32_t> ids, std::int32_t t) {
    for (std::int32_t id : ids)
      if (id == t) return true;
    return false;
  }
  static const BatchSequence* find_sequence(const HybridBatch& b, int row) {
    for (const auto* seqs : {&b.prefills, &b.decodes})
      for (const BatchSequence& s : *seqs)
        if (s.token_offset + s.num_new - 1 == row) return &s;
    return nullptr;
  }

  SlotMemory* memory_;
  int vocab_size_;
};

// Emits a fixed script of tokens per request, chosen by the request's first
// prompt token: script[prompt[0]][k] is its k-th output token. Suppressed ids
// (stop tokens before min_tokens) are replaced by `filler`.
class ScriptedModel final : public ModelExecutor {
 public:
  ScriptedModel(std::map<std::int32_t, std::vector<std::int32_t>> scripts, std::int32_t filler)
      : scripts_(std::move(scripts)), filler_(filler) {}

  Status forward(const HybridBatch&, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out) override {
    ++num_forwards;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const SampleSpec& spec = samples[i];
      const std::vector<std::int32_t>& script = scripts_.at(spec.token_ids[0]);
      std::int32_t token =
          spec.output_index < static_cast<int>(script.size()) ? script[spec.output_index] : filler_;
      for (std::int32_t id : spec.suppressed_ids)
        if (id == token) token = filler_;
      out[i] = SampledToken{};
      out[i].token = token;
      out[i].logprob = -0.5f * static_cast<float>(spec.output_index);
      for (int k = 0; k < spec.num_logprobs; ++k) out[i].top[k] = {token + k, -1.0f * k};
      out[i].num_top = std::max(spec.num_logprobs, 0);
    }
    return {};
  }
  int num_forwards = 0;

 private:
  std::map<std::int32_t, std::vector<std::int32_t>> scripts_;
  std::int32_t filler_;
};

// Token id -> bytes; text is released in whole UTF-8 characters.
class ByteDecoder final : public IncrementalDecoder {
 public:
  explicit ByteDecoder(const std::vector<std::string>* pieces) : pieces_(pieces) {}
  void append(std::int32_t token, std::string& out) override {
    pending_ += pieces_->at(token);
    std::size_t complete = 0;  // length of the longest prefix of whole characters
    for (std::size_t i = 0; i < pending_.size();) {
      const unsigned char c = static_cast<unsigned char>(pending_[i]);
      const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      if (i + len > pending_.size()) break;
      i += len;
      complete = i;
    }
    out.append(pending_, 0, complete);
    pending_.erase(0, complete);
  }
  void finish(std::string& out) override {
    if (!pending_.empty()) out += "\xEF\xBF\xBD";  // U+FFFD for a cut character
    pending_.clear();
  }

 private:
  const std::vector<std::string>* pieces_;
  std::string pending_;
};

class ByteDecoderFactory final : public DecoderFactory {
 public:
  explicit ByteDecoderFactory(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  std::unique_ptr<IncrementalDecoder> create(std::span<const std::int32_t>, bool) const override {
    return std::make_unique<ByteDecoder>(&pieces_);
  }
  // The full text of `tokens`, decoded at once.
  std::string decode(std::span<const std::int32_t> tokens) const {
    std::string s;
    for (std::int32_t t : tokens) s += pieces_.at(t);
    return s;
  }

 private:
  std::vector<std::string> pieces_;
};

// Pieces for a vocabulary of `n` tokens: short lower-case words.
inline std::vector<std::string> word_pieces(int n) {
  std::vector<std::string> pieces(n);
  for (int i = 0; i < n; ++i) {
    pieces[i] = std::string(1, static_cast<char>('a' + i % 26));
    if (i % 3 == 0) pieces[i] += static_cast<char>('a' + (i / 26) % 26);
    if (i % 5 == 0) pieces[i] = " " + pieces[i];
  }
  return pieces;
}

}  // namespace vpod::engine::testing
