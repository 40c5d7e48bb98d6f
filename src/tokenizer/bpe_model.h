// The BPE model: vocabulary, rank-ordered merges, byte fallback, unknown
// tokens, and a cache of encoded words. Encodes one pre-tokenized piece at a
// time with exactly the merge order of Hugging Face tokenizers' Word::merge_all
// (lowest rank first, leftmost on ties).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vpod::tokenizer {

using TokenId = std::int32_t;

std::uint64_t hash_bytes(std::string_view bytes);

// token string <-> id. Strings live in one arena; the open-addressing table
// keeps each string's offset, length, id and a hash tag, so a lookup touches
// the arena only for a probable hit (loading Llama-3 does ~10^6 lookups).
class Vocab {
 public:
  void reserve(std::size_t count);
  // Adds or re-maps `token`; ids need not be dense.
  void insert(std::string_view token, TokenId id);
  // insert() for many tokens, in order, prefetching ahead.
  void insert_batch(std::span<const std::string_view> tokens, std::span<const TokenId> ids);
  // The id of `token`, or -1.
  TokenId find(std::string_view token) const;
  // find() over many tokens, prefetching ahead to overlap cache misses.
  void find_batch(std::span<const std::string_view> tokens, std::span<TokenId> ids) const;
  // The token of `id`, or nullopt.
  std::optional<std::string_view> token(TokenId id) const;
  std::size_t size() const { return size_; }
  // One past the largest id.
  std::size_t id_limit() const { return by_id_.size(); }

 private:
  struct Slot {
    std::uint32_t offset;
    std::uint32_t length;
    TokenId id;         // -1 when the slot is free
    std::uint32_t tag;  // high bits of the hash
  };
  struct Span {
    std::uint32_t offset;
    std::uint32_t length;  // kNoToken when the id is unused
  };
  static constexpr std::uint32_t kNoToken = ~std::uint32_t{0};
  std::string_view text(std::uint32_t offset, std::uint32_t length) const {
    return {arena_.data() + offset, length};
  }
  void rehash(std::size_t capacity);
  TokenId find_hashed(std::string_view token, std::uint64_t hash) const;
  void insert_hashed(std::string_view token, TokenId id, std::uint64_t hash);

  std::string arena_;
  std::vector<Slot> slots_;
  std::vector<Span> by_id_;
  std::size_t size_ = 0;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  BpeModel(Vocab vocab, BpeOptions options);
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

  // Adds merges in rank order (the first has rank 0). Later duplicates
  // replace earlier ones, as in tokenizers' merge map. On error, the Status
  // names the index of the offending merge.
  Status add_merges(std::span<const std::pair<std::string_view, std::string_view>> merges);

  // Appends the ids of one piece.
  Status tokenize(std::string_view piece, std::vector<TokenId>& ids) const;

  const Vocab& vocab() const { return vocab_; }
  std::size_t num_merges() const { return num_merges_; }
  bool byte_fallback() const { return options_.byte_fallback; }

 private:
  struct MergeSlot {
    std::uint64_t key;  // (left id << 32) | right id; kEmptyKey when unused
    std::uint32_t rank;
    TokenId new_id;
  };
  class WordCache;

  void reserve_merges(std::size_t count);
  const MergeSlot* find_merge(TokenId left, TokenId right) const;
  void insert_merge(TokenId left, TokenId right, std::uint32_t rank, TokenId new_id);
  Status merge_word(std::string_view word, std::vector<TokenId>& ids) const;
  Status tokenize_word(std::string_view word, std::vector<TokenId>& ids) const;

  Vocab vocab_;
  BpeOptions options_;
  TokenId unk_id_ = -1;
  std::array<TokenId, 256> byte_token_ids_{};  // "<0xAB>" ids, -1 when absent
  std::vector<MergeSlot> merge_slots_;
  std::size_t num_merges_ = 0;  // distinct pairs
  // SentencePiece-style pieces ("▁The▁cat▁sat", no pre-tokenizer) are whole
  // lines. When no merge can join a symbol ending in another character to
  // one starting with "▁", BPE on the line equals BPE on its "▁word" parts,
  // which can then be cached: add_merges() checks that and sets this flag.
  bool split_before_metaspace_ = false;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace vpod::tokenizer
