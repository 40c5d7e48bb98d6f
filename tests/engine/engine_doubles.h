// Deterministic test doubles of the engine's three borrowed interfaces.
//
// FakeKvCache (KvCapacity): fixed-size blocks per slot, like a paged cache;
// every reservation, growth and free is checked. With prefix caching on it
// has a real prefix cache of its own: the full prompt blocks the scheduler
// reports computed (cache_prompt) are indexed exactly (salt and every token
// up to the block's end, no hashing); an admission whose tokens start with
// indexed blocks of its salt gets them, shared (counted once) while any slot
// holds them, kept when none does, and reused least recently released first
// when the pool runs short. With a SlotMemory the hit tokens are written into
// the new slot's memory, as a real store maps the cached K/V there, so
// HashModel's checks (no gap, nothing computed twice) cover hits as well;
// and cache_prompt is checked against what the prepared step computes.
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
#include <span>
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
              SlotMemory* memory = nullptr, bool prefix_caching = false)
      : num_blocks_(num_blocks),
        block_tokens_(block_tokens),
        max_tokens_per_slot_(max_tokens_per_slot),
        max_blocks_per_slot_(blocks_for(max_tokens_per_slot)),
        prefix_caching_(prefix_caching),
        blocks_(num_blocks),
        slots_(num_slots),
        memory_(memory) {
    // Everything a step touches is sized here: the engine's "a step
    // allocates nothing" is tested through this double.
    free_.reserve(num_blocks);
    for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
    if (prefix_caching_)
      for (Block& block : blocks_) block.prefix.reserve(max_tokens_per_slot);
    for (Slot& slot : slots_) {
      slot.blocks.reserve(max_blocks_per_slot_);
      if (memory_) slot.step_tokens.reserve(max_tokens_per_slot);
    }
    hits_.reserve(max_blocks_per_slot_);
    if (memory_) {
      memory_->tokens.assign(num_slots, {});
      for (auto& slot : memory_->tokens) slot.reserve(max_tokens_per_slot);
    }
  }

  int max_tokens_per_slot() const override { return max_tokens_per_slot_; }
  std::int64_t capacity_tokens() const override {
    return std::int64_t{num_blocks_} * block_tokens_;
  }
  bool can_allocate(int num_tokens, const kvcache::PrefixQuery& prefix) const override {
    if (free_slot() < 0 || num_tokens > max_tokens_per_slot_) return false;
    const int hits = match(num_tokens, prefix);
    int revived = 0;  // hit blocks no slot holds: they leave the evictable pool
    for (int i = 0; i < hits; ++i) revived += blocks_[hits_[i]].refs == 0;
    return blocks_for(num_tokens) - hits <= available() - revived;
  }
  kvcache::Allocation allocate(int num_tokens, const kvcache::PrefixQuery& prefix) override {
    EXPECT_TRUE(can_allocate(num_tokens, prefix));
    const int slot_id = free_slot();
    Slot& slot = slots_[slot_id];
    slot.used = true;
    slot.salt = prefix.salt;
    const int hits = match(num_tokens, prefix);
    for (int i = 0; i < hits; ++i) {
      Block& b = blocks_[hits_[i]];
      if (b.refs++ == 0) --num_evictable_;
      slot.blocks.push_back(hits_[i]);
    }
    while (static_cast<int>(slot.blocks.size()) < blocks_for(num_tokens))
      slot.blocks.push_back(take_block());
    const int cached = hits * block_tokens_;
    if (memory_) {
      // The cached K/V appear in the new slot, as a real store maps them there.
      std::vector<std::int32_t>& mem = memory_->tokens[slot_id];
      EXPECT_TRUE(mem.empty()) << "slot " << slot_id << " was not wiped";
      mem.assign(prefix.tokens.begin(), prefix.tokens.begin() + cached);
    }
    ++num_allocations;
    hit_tokens += cached;
    return {.slot = slot_id, .cached_tokens = cached};
  }
  bool grow(int slot_id, int num_tokens) override {
    EXPECT_TRUE(slots_.at(slot_id).used) << "grow of a free slot";
    if (num_tokens > max_tokens_per_slot_) return false;
    Slot& slot = slots_[slot_id];
    const int extra = blocks_for(num_tokens) - static_cast<int>(slot.blocks.size());
    if (extra <= 0) return true;
    if (extra > available()) return false;
    for (int i = 0; i < extra; ++i) slot.blocks.push_back(take_block());
    return true;
  }
  void free(int slot_id) override {
    EXPECT_TRUE(slots_.at(slot_id).used) << "double free of slot " << slot_id;
    Slot& slot = slots_[slot_id];
    for (int b : slot.blocks) release_block(b);
    slot.blocks.clear();
    slot.step_tokens.clear();
    slot.used = false;
    if (memory_) memory_->wipe(slot_id);
    ++num_frees;
  }
  Status prepare(const HybridBatch& batch) override {
    // Every sequence's tokens must be reserved before the forward runs.
    for (const auto* seqs : {&batch.prefills, &batch.decodes})
      for (const BatchSequence& s : *seqs) {
        EXPECT_TRUE(slots_.at(s.slot).used) << "prepare of a free slot";
        EXPECT_LE(s.context_len(), static_cast<int>(slots_[s.slot].blocks.size()) * block_tokens_)
            << "slot " << s.slot << " runs past its reservation";
      }
    // What each prefill leaves in its slot once the step ran: cache_prompt
    // may index no more than that, and only those very tokens.
    if (memory_) {
      for (const BatchSequence& s : batch.prefills) {
        const std::vector<std::int32_t>& mem = memory_->tokens[s.slot];
        std::vector<std::int32_t>& after = slots_[s.slot].step_tokens;
        after.assign(mem.begin(), mem.begin() + std::min<std::size_t>(mem.size(), s.cached_len));
        after.insert(after.end(), batch.token_ids.begin() + s.token_offset,
                     batch.token_ids.begin() + s.token_offset + s.num_new);
      }
    }
    ++num_prepares;
    return {};
  }
  void cache_prompt(int slot_id, std::span<const std::int32_t> prompt, int computed) override {
    ++num_cache_prompts;
    EXPECT_TRUE(slots_.at(slot_id).used) << "cache_prompt of a free slot";
    EXPECT_GE(computed, 0);
    EXPECT_LE(computed, static_cast<int>(prompt.size()));
    Slot& slot = slots_[slot_id];
    if (memory_) {
      EXPECT_LE(computed, static_cast<int>(slot.step_tokens.size()))
          << "slot " << slot_id << ": the step does not compute that far";
      EXPECT_TRUE(computed <= static_cast<int>(slot.step_tokens.size()) &&
                  std::equal(prompt.begin(), prompt.begin() + computed, slot.step_tokens.begin()))
          << "slot " << slot_id << ": the prompt reported is not what the slot computes";
    }
    if (!prefix_caching_) return;
    const int full = std::min<int>(computed / block_tokens_, slot.blocks.size());
    for (int k = 0; k < full; ++k) {
      Block& b = blocks_[slot.blocks[k]];
      if (b.indexed) continue;  // a hit, or indexed by an earlier step
      const auto tokens = prompt.first(static_cast<std::size_t>(k + 1) * block_tokens_);
      if (find(slot.salt, tokens) >= 0) continue;  // a twin is indexed: this copy stays private
      b.indexed = true;
      b.salt = slot.salt;
      b.prefix.assign(tokens.begin(), tokens.end());
    }
  }
  double usage() const override { return double(used_blocks()) / num_blocks_; }

  // Blocks some slot holds (a shared block counts once).
  int used_blocks() const {
    int n = 0;
    for (const Block& b : blocks_) n += b.refs > 0;
    return n;
  }
  int cached_blocks() const {
    int n = 0;
    for (const Block& b : blocks_) n += b.indexed;
    return n;
  }
  int slots_in_use() const {
    int n = 0;
    for (const Slot& s : slots_) n += s.used;
    return n;
  }
  // The pool is conserved, each block's holders are counted exactly, no
  // slot holds a block twice, and no two indexed blocks are the same.
  void check() const {
    std::vector<int> holders(num_blocks_, 0);
    for (const Slot& s : slots_) {
      EXPECT_TRUE(s.used || s.blocks.empty());
      for (int b : s.blocks) ++holders[b];
      for (std::size_t i = 0; i < s.blocks.size(); ++i)
        for (std::size_t j = i + 1; j < s.blocks.size(); ++j)
          EXPECT_NE(s.blocks[i], s.blocks[j]) << "a slot holds a block twice";
    }
    int evictable = 0;
    for (int b = 0; b < num_blocks_; ++b) {
      EXPECT_EQ(blocks_[b].refs, holders[b]) << "block " << b;
      evictable += blocks_[b].refs == 0 && blocks_[b].indexed;
      const bool is_free = std::find(free_.begin(), free_.end(), b) != free_.end();
      EXPECT_EQ(is_free, blocks_[b].refs == 0 && !blocks_[b].indexed) << "block " << b;
      for (int c = b + 1; c < num_blocks_; ++c)
        EXPECT_FALSE(blocks_[b].indexed && blocks_[c].indexed &&
                     blocks_[b].salt == blocks_[c].salt && blocks_[b].prefix == blocks_[c].prefix)
            << "blocks " << b << " and " << c << " are indexed twice";
    }
    EXPECT_EQ(evictable, num_evictable_);
  }

  int num_allocations = 0;
  int num_frees = 0;
  int num_prepares = 0;
  int num_cache_prompts = 0;
  long hit_tokens = 0;  // cached tokens handed out by allocate()
  int num_evictions = 0;

 private:
  struct Block {
    int refs = 0;  // slots holding it
    bool indexed = false;
    std::uint64_t salt = 0;
    std::vector<std::int32_t> prefix;  // indexed: every token up to the block's end
    std::uint64_t released_at = 0;     // unreferenced and indexed: LRU order
  };
  struct Slot {
    bool used = false;
    std::uint64_t salt = 0;
    std::vector<int> blocks;                // [position / block_tokens]
    std::vector<std::int32_t> step_tokens;  // what the prepared step leaves in it
  };

  int blocks_for(int tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
  int free_slot() const {
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].used) return static_cast<int>(i);
    return -1;
  }
  int available() const { return static_cast<int>(free_.size()) + num_evictable_; }
  // The indexed block holding exactly `tokens` (its prefix) under `salt`, or -1.
  int find(std::uint64_t salt, std::span<const std::int32_t> tokens) const {
    for (int b = 0; b < num_blocks_; ++b) {
      const Block& block = blocks_[b];
      if (block.indexed && block.salt == salt && block.prefix.size() == tokens.size() &&
          std::equal(tokens.begin(), tokens.end(), block.prefix.begin()))
        return b;
    }
    return -1;
  }
  // The leading indexed blocks of the query into hits_, leaving at least the
  // last of `num_tokens` uncached; returns how many.
  int match(int num_tokens, const kvcache::PrefixQuery& q) const {
    hits_.clear();
    if (!prefix_caching_) return 0;
    const int max_blocks =
        std::min<int>((num_tokens - 1) / block_tokens_, q.tokens.size() / block_tokens_);
    for (int k = 0; k < max_blocks; ++k) {
      const int b = find(q.salt, q.tokens.first(static_cast<std::size_t>(k + 1) * block_tokens_));
      if (b < 0) break;
      hits_.push_back(b);
    }
    return static_cast<int>(hits_.size());
  }
  // A block for one slot: a free one, else the least recently released
  // cached one (evicted from the index).
  int take_block() {
    int b = -1;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      for (int c = 0; c < num_blocks_; ++c)
        if (blocks_[c].refs == 0 && blocks_[c].indexed &&
            (b < 0 || blocks_[c].released_at < blocks_[b].released_at))
          b = c;
      EXPECT_GE(b, 0) << "no block left: admission or growth promised too much";
      if (b < 0) return 0;
      blocks_[b].indexed = false;
      blocks_[b].prefix.clear();
      --num_evictable_;
      ++num_evictions;
    }
    blocks_[b].refs = 1;
    return b;
  }
  void release_block(int b) {
    Block& block = blocks_[b];
    EXPECT_GT(block.refs, 0);
    if (--block.refs > 0) return;
    if (block.indexed) {
      block.released_at = ++clock_;
      ++num_evictable_;
    } else {
      free_.push_back(b);
    }
  }

  int num_blocks_;
  int block_tokens_;
  int max_tokens_per_slot_;
  int max_blocks_per_slot_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<Slot> slots_;
  std::vector<int> free_;  // unreferenced, not indexed (a stack)
  int num_evictable_ = 0;  // unreferenced, indexed
  std::uint64_t clock_ = 0;
  mutable std::vector<int> hits_;  // match()'s result
  SlotMemory* memory_;
};

class HashModel final : public ModelExecutor {
 public:
  HashModel(SlotMemory* memory, int vocab_size) : memory_(memory), vocab_size_(vocab_size) {}

  // The prompt logprob the model reports at a position whose cached tokens
  // are `prefix`, for the next token `target`: a function of both alone.
  static SampledToken prompt_score(std::span<const std::int32_t> prefix, std::int32_t target,
                                   int num_top, int vocab_size) {
    std::uint64_t h = 0;
    for (std::int32_t t : prefix) h = mix64(h ^ static_cast<std::uint64_t>(t));
    h = mix64(h ^ (static_cast<std::uint64_t>(target) << 32));
    SampledToken s;
    s.token = target;
    s.logprob = -static_cast<float>(h % 1000) / 100.0f;
    s.rank = 1 + static_cast<std::int32_t>((h >> 20) % 9);
    s.num_top = num_top;
    for (int k = 0; k < num_top; ++k)
      s.top[k] = {static_cast<std::int32_t>((h + k) % vocab_size), -static_cast<float>(k) / 4.0f};
    return s;
  }

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out, const PromptScores& scores) override {
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

    // Prompt rows: each lies in one prefill chunk; where the chunk holds the
    // next token too, it must be the target the engine asked about.
    std::size_t next = 0;
    for (const PromptScoreSpec& sc : scores.specs) {
      EXPECT_EQ(sc.targets.size(), static_cast<std::size_t>(sc.num_rows));
      const BatchSequence* seq = nullptr;
      for (const BatchSequence& s : batch.prefills) {
        if (sc.first_row >= s.token_offset && sc.first_row < s.token_offset + s.num_new) seq = &s;
      }
      EXPECT_NE(seq, nullptr) << "scored row " << sc.first_row << " is in no prefill chunk";
      if (!seq) return internal_error("bad scored row");
      EXPECT_LE(sc.first_row + sc.num_rows, seq->token_offset + seq->num_new);
      const std::vector<std::int32_t>& mem = memory_->tokens[seq->slot];
      for (int i = 0; i < sc.num_rows; ++i) {
        const int pos = seq->cached_len + (sc.first_row + i - seq->token_offset);
        if (pos + 1 < static_cast<int>(mem.size())) {
          EXPECT_EQ(mem[pos + 1], sc.targets[i]);
        }
        EXPECT_LT(next, scores.out.size());
        if (next >= scores.out.size()) return internal_error("scored rows overflow");
        scores.out[next++] =
            prompt_score(std::span(mem).first(pos + 1), sc.targets[i], sc.num_top, vocab_size_);
      }
    }
    EXPECT_EQ(next, scores.out.size());
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
                 std::span<SampledToken> out, const PromptScores& scores) override {
    ++num_forwards;
    EXPECT_TRUE(scores.specs.empty()) << "ScriptedModel scores no prompts";
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
