// The BPE model (bpe_model.h): the vocabulary's hash table, the merge ranks, and
// encoding a word by merge_all's order, with byte fallback and the word cache.

#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "common/utf8.h"

namespace vpod::tokenizer {
namespace {

constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Words at least this long are not cached (tokenizers' MAX_LENGTH): they are
// rare and would crowd out the common ones.
constexpr std::size_t kMaxCachedWordBytes = 256;
// The cache is split in shards, each with its own lock, so that threads
// encoding at the same time rarely wait for each other. A full shard is
// cleared, which keeps it bounded and adapts it to the text at hand.
constexpr std::size_t kCacheShards = 16;
constexpr std::size_t kCacheEntriesPerShard = 8192;

inline std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline std::uint64_t pair_key(TokenId left, TokenId right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

}  // namespace

std::uint64_t hash_bytes(std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t n = bytes.size();
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xbf58476d1ce4e5b9ull);
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  std::uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix(h ^ w);
}

// ---------------------------------------------------------------------------
// Vocab
// ---------------------------------------------------------------------------

void Vocab::reserve(std::size_t count) {
  std::size_t capacity = 16;
  while (capacity < count * 2) capacity *= 2;
  if (capacity > slots_.size()) rehash(capacity);
}

void Vocab::rehash(std::size_t capacity) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{0, 0, -1, 0});
  const std::size_t mask = capacity - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    std::size_t slot = hash_bytes(text(s.offset, s.length)) & mask;
    while (slots_[slot].id >= 0) slot = (slot + 1) & mask;
    slots_[slot] = s;
  }
}

void Vocab::insert(std::string_view token, TokenId id) {
  insert_hashed(token, id, hash_bytes(token));
}

void Vocab::insert_batch(std::span<const std::string_view> tokens, std::span<const TokenId> ids) {
  VPOD_CHECK(tokens.size() == ids.size());
  const std::size_t n = tokens.size();
  reserve(size_ + n);
  std::size_t bytes = 0;
  TokenId max_id = -1;
  for (std::size_t i = 0; i < n; ++i) {
    bytes += tokens[i].size();
    max_id = std::max(max_id, ids[i]);
  }
  arena_.reserve(arena_.size() + bytes);
  if (static_cast<std::size_t>(max_id + 1) > by_id_.size()) {
    by_id_.resize(max_id + 1, Span{0, kNoToken});
  }
  constexpr std::size_t kAhead = 16;
  std::vector<std::uint64_t> hashes(n);
  for (std::size_t i = 0; i < n; ++i) hashes[i] = hash_bytes(tokens[i]);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&slots_[hashes[i + kAhead] & mask]);
    insert_hashed(tokens[i], ids[i], hashes[i]);
  }
}

void Vocab::insert_hashed(std::string_view token, TokenId id, std::uint64_t hash) {
  VPOD_CHECK(id >= 0);
  if ((size_ + 1) * 2 > slots_.size()) rehash(std::max<std::size_t>(16, slots_.size() * 2));
  const auto tag = static_cast<std::uint32_t>(hash >> 32);
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = hash & mask;
  if (static_cast<std::size_t>(id) >= by_id_.size()) by_id_.resize(id + 1, Span{0, kNoToken});
  while (slots_[slot].id >= 0) {
    Slot& s = slots_[slot];
    if (s.tag == tag && text(s.offset, s.length) == token) {
      // Re-mapped: the later id wins, the earlier one no longer names it.
      by_id_[s.id] = Span{0, kNoToken};
      s.id = id;
      by_id_[id] = Span{s.offset, s.length};
      return;
    }
    slot = (slot + 1) & mask;
  }
  const auto offset = static_cast<std::uint32_t>(arena_.size());
  const auto length = static_cast<std::uint32_t>(token.size());
  arena_.append(token);
  slots_[slot] = Slot{offset, length, id, tag};
  by_id_[id] = Span{offset, length};
  ++size_;
}

TokenId Vocab::find(std::string_view token) const {
  if (slots_.empty()) return -1;
  return find_hashed(token, hash_bytes(token));
}

TokenId Vocab::find_hashed(std::string_view token, std::uint64_t hash) const {
  const auto tag = static_cast<std::uint32_t>(hash >> 32);
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = hash & mask;
  while (true) {
    const Slot& s = slots_[slot];
    if (s.id < 0) return -1;
    if (s.tag == tag && s.length == token.size() && text(s.offset, s.length) == token) return s.id;
    slot = (slot + 1) & mask;
  }
}

void Vocab::find_batch(std::span<const std::string_view> tokens, std::span<TokenId> ids) const {
  VPOD_CHECK(tokens.size() == ids.size());
  if (slots_.empty()) {
    std::fill(ids.begin(), ids.end(), -1);
    return;
  }
  // Two stages ahead of the lookup: prefetch the slot kAhead tokens ahead,
  // then (half-way) the arena bytes of a probable hit.
  constexpr std::size_t kAhead = 16;
  const std::size_t n = tokens.size();
  const std::size_t mask = slots_.size() - 1;
  std::vector<std::uint64_t> hashes(n);
  for (std::size_t i = 0; i < n; ++i) hashes[i] = hash_bytes(tokens[i]);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&slots_[hashes[i + kAhead] & mask]);
    if (i + kAhead / 2 < n) {
      const std::uint64_t h = hashes[i + kAhead / 2];
      const Slot& s = slots_[h & mask];
      if (s.id >= 0 && s.tag == static_cast<std::uint32_t>(h >> 32)) {
        __builtin_prefetch(arena_.data() + s.offset);
      }
    }
    ids[i] = find_hashed(tokens[i], hashes[i]);
  }
}

std::optional<std::string_view> Vocab::token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= by_id_.size()) return std::nullopt;
  const Span span = by_id_[id];
  if (span.length == kNoToken) return std::nullopt;
  return text(span.offset, span.length);
}

// ---------------------------------------------------------------------------
// Word cache
// ---------------------------------------------------------------------------

class BpeModel::WordCache {
 public:
  bool lookup(std::string_view word, std::vector<TokenId>& ids) {
    Shard& shard = shard_of(word);
    std::lock_guard<std::mutex> lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }
  void insert(std::string_view word, const TokenId* ids, std::size_t count) {
    Shard& shard = shard_of(word);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.map.size() >= kCacheEntriesPerShard) shard.map.clear();
    shard.map.emplace(std::string(word), std::vector<TokenId>(ids, ids + count));
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return hash_bytes(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<TokenId>, Hash, std::equal_to<>> map;
  };
  Shard& shard_of(std::string_view word) {
    return shards_[(hash_bytes(word) >> 58) % kCacheShards];
  }
  std::array<Shard, kCacheShards> shards_;
};

// ---------------------------------------------------------------------------
// BpeModel
// ---------------------------------------------------------------------------

BpeModel::BpeModel(Vocab vocab, BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)), cache_(new WordCache) {
  if (options_.unk_token) unk_id_ = vocab_.find(*options_.unk_token);
  for (int b = 0; b < 256; ++b) byte_token_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b));
}

BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

void BpeModel::reserve_merges(std::size_t count) {
  // Load factor at most 2/3: the table is large (16 bytes a slot), and
  // fewer cache misses while loading matter more than probe lengths.
  std::size_t capacity = 16;
  while (capacity * 2 < count * 3) capacity *= 2;
  if (capacity <= merge_slots_.size()) return;
  std::vector<MergeSlot> old = std::move(merge_slots_);
  merge_slots_.assign(capacity, MergeSlot{kEmptyKey, 0, 0});
  num_merges_ = 0;
  for (const MergeSlot& s : old) {
    if (s.key != kEmptyKey) {
      insert_merge(static_cast<TokenId>(s.key >> 32), static_cast<TokenId>(s.key & 0xFFFFFFFFu),
                   s.rank, s.new_id);
    }
  }
}

void BpeModel::insert_merge(TokenId left, TokenId right, std::uint32_t rank, TokenId new_id) {
  if ((num_merges_ + 1) * 3 > merge_slots_.size() * 2) {
    reserve_merges(std::max<std::size_t>(16, num_merges_ * 2));
  }
  const std::uint64_t key = pair_key(left, right);
  const std::size_t mask = merge_slots_.size() - 1;
  std::size_t slot = mix(key) & mask;
  while (merge_slots_[slot].key != kEmptyKey) {
    if (merge_slots_[slot].key == key) {  // a later duplicate replaces the earlier merge
      merge_slots_[slot].rank = rank;
      merge_slots_[slot].new_id = new_id;
      return;
    }
    slot = (slot + 1) & mask;
  }
  merge_slots_[slot] = MergeSlot{key, rank, new_id};
  ++num_merges_;
}

const BpeModel::MergeSlot* BpeModel::find_merge(TokenId left, TokenId right) const {
  if (merge_slots_.empty()) return nullptr;
  const std::uint64_t key = pair_key(left, right);
  const std::size_t mask = merge_slots_.size() - 1;
  std::size_t slot = mix(key) & mask;
  while (true) {
    const MergeSlot& s = merge_slots_[slot];
    if (s.key == key) return &s;
    if (s.key == kEmptyKey) return nullptr;
    slot = (slot + 1) & mask;
  }
}

Status BpeModel::add_merges(std::span<const std::pair<std::string_view, std::string_view>> merges) {
  const std::size_t n = merges.size();
  // Every merge needs three lookups (a, b and a+b): do them in batches so the
  // cache misses overlap; this is most of the time a large file takes to load.
  const std::size_t prefix_len = options_.continuing_subword_prefix.size();
  std::string joined_arena;
  std::vector<std::string_view> lookups(3 * n);
  std::vector<std::size_t> joined_offsets(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [a, b] = merges[i];
    if (b.size() < prefix_len) {
      return invalid_argument(
          fmt::format("merges[{}]: '{}' is shorter than the subword prefix", i, b));
    }
    joined_offsets[i] = joined_arena.size();
    joined_arena += a;
    joined_arena += b.substr(prefix_len);
    lookups[3 * i] = a;
    lookups[3 * i + 1] = b;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t end = i + 1 < n ? joined_offsets[i + 1] : joined_arena.size();
    lookups[3 * i + 2] =
        std::string_view(joined_arena).substr(joined_offsets[i], end - joined_offsets[i]);
  }
  std::vector<TokenId> ids(3 * n);
  vocab_.find_batch(lookups, ids);
  reserve_merges(num_merges_ + n);
  for (std::size_t i = 0; i < n; ++i) {
    for (int k = 0; k < 3; ++k) {
      if (ids[3 * i + k] < 0) {
        return invalid_argument(fmt::format("merges[{}]: {}token '{}' is not in the vocab", i,
                                            k == 2 ? "merged " : "", lookups[3 * i + k]));
      }
    }
  }
  // Word splitting is safe when no merge crosses a "x|▁" boundary, "▁" is a
  // token of its own (so no unknown run fuses across it), and no prefix or
  // suffix depends on the position in the piece.
  bool crossing = false;
  for (const auto& [a, b] : merges) {
    const bool a_ends_with_metaspace =
        a.size() >= kMetaspace.size() && a.substr(a.size() - kMetaspace.size()) == kMetaspace;
    crossing = crossing || (!a_ends_with_metaspace && b.substr(0, kMetaspace.size()) == kMetaspace);
  }
  split_before_metaspace_ = !crossing && vocab_.find(kMetaspace) >= 0 &&
                            options_.continuing_subword_prefix.empty() &&
                            options_.end_of_word_suffix.empty();
  const std::size_t mask = merge_slots_.size() - 1;
  constexpr std::size_t kAhead = 16;
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const std::size_t j = 3 * (i + kAhead);
      __builtin_prefetch(&merge_slots_[mix(pair_key(ids[j], ids[j + 1])) & mask]);
    }
    // The rank is the merge's position in the file.
    insert_merge(ids[3 * i], ids[3 * i + 1], static_cast<std::uint32_t>(i), ids[3 * i + 2]);
  }
  return {};
}

Status BpeModel::tokenize(std::string_view piece, std::vector<TokenId>& ids) const {
  if (piece.empty()) return {};
  if (options_.ignore_merges) {
    const TokenId id = vocab_.find(piece);
    if (id >= 0) {
      ids.push_back(id);
      return {};
    }
  }
  if (!split_before_metaspace_) return tokenize_word(piece, ids);
  // Cut before each "▁" that follows another character.
  std::size_t start = 0;
  std::size_t pos = piece.find(kMetaspace, 1);
  while (pos != std::string_view::npos) {
    const bool after_metaspace =
        pos >= kMetaspace.size() &&
        piece.substr(pos - kMetaspace.size(), kMetaspace.size()) == kMetaspace;
    if (!after_metaspace && pos > start) {
      VPOD_RETURN_IF_ERROR(tokenize_word(piece.substr(start, pos - start), ids));
      start = pos;
    }
    pos = piece.find(kMetaspace, pos + kMetaspace.size());
  }
  return tokenize_word(piece.substr(start), ids);
}

Status BpeModel::tokenize_word(std::string_view word, std::vector<TokenId>& ids) const {
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable && cache_->lookup(word, ids)) return {};
  const std::size_t first = ids.size();
  VPOD_RETURN_IF_ERROR(merge_word(word, ids));
  if (cacheable) cache_->insert(word, ids.data() + first, ids.size() - first);
  return {};
}

Status BpeModel::merge_word(std::string_view word, std::vector<TokenId>& ids) const {
  struct Symbol {
    TokenId id;
    std::int32_t prev;
    std::int32_t next;
    std::uint32_t len;  // bytes covered; 0 once merged into its left neighbour
  };
  struct Merge {
    std::uint32_t rank;
    std::uint32_t pos;
    TokenId new_id;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Merge> queue;
  thread_local std::string scratch;
  symbols.clear();
  queue.clear();

  auto add = [](TokenId id, std::uint32_t len) {
    const auto index = static_cast<std::int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back(Symbol{id, index - 1, -1, len});
  };

  // 1. One symbol per character (tokenizers' BPE::merge_word).
  bool pending_unk = false;
  std::uint32_t unk_len = 0;
  std::size_t i = 0;
  while (i < word.size()) {
    const std::size_t end =
        std::min(word.size(), i + utf8::sequence_length(static_cast<unsigned char>(word[i])));
    std::string_view s = word.substr(i, end - i);
    const bool is_first = i == 0;
    const bool is_last = end == word.size();
    if ((!is_first && !options_.continuing_subword_prefix.empty()) ||
        (is_last && !options_.end_of_word_suffix.empty())) {
      scratch.clear();
      if (!is_first) scratch += options_.continuing_subword_prefix;
      scratch += s;
      if (is_last) scratch += options_.end_of_word_suffix;
      s = scratch;
    }
    i = end;
    const TokenId id = vocab_.find(s);
    if (id >= 0) {
      if (pending_unk) {
        add(unk_id_, unk_len);
        pending_unk = false;
      }
      add(id, static_cast<std::uint32_t>(s.size()));
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes = true;
      for (const char c : s)
        all_bytes = all_bytes && byte_token_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // As in tokenizers, a pending unknown token is not flushed here.
        for (const char c : s) add(byte_token_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (options_.unk_token) {
      if (unk_id_ < 0) {
        return invalid_argument(
            fmt::format("unk_token '{}' is not in the vocab", *options_.unk_token));
      }
      if (pending_unk && options_.fuse_unk) {
        unk_len += static_cast<std::uint32_t>(s.size());
      } else {
        if (pending_unk) add(unk_id_, unk_len);
        pending_unk = true;
        unk_len = static_cast<std::uint32_t>(s.size());
      }
    }
    // Without an unk token an unknown character is dropped, as in tokenizers.
  }
  if (pending_unk) add(unk_id_, unk_len);

  // 2. Merges, lowest rank first, then leftmost (Word::merge_all).
  auto later = [](const Merge& a, const Merge& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  for (std::size_t p = 0; p + 1 < symbols.size(); ++p) {
    if (const MergeSlot* m = find_merge(symbols[p].id, symbols[p + 1].id)) {
      queue.push_back(Merge{m->rank, static_cast<std::uint32_t>(p), m->new_id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), later);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const Merge top = queue.back();
    queue.pop_back();
    Symbol& current = symbols[top.pos];
    if (current.len == 0 || current.next < 0) continue;
    const std::int32_t next_pos = current.next;
    const Symbol right = symbols[next_pos];
    const MergeSlot* m = find_merge(current.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // a stale entry
    current.id = top.new_id;
    current.len += right.len;
    current.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = static_cast<std::int32_t>(top.pos);
    if (current.prev >= 0) {
      if (const MergeSlot* pm = find_merge(symbols[current.prev].id, current.id)) {
        queue.push_back(Merge{pm->rank, static_cast<std::uint32_t>(current.prev), pm->new_id});
        std::push_heap(queue.begin(), queue.end(), later);
      }
    }
    if (current.next >= 0) {
      if (const MergeSlot* nm = find_merge(current.id, symbols[current.next].id)) {
        queue.push_back(Merge{nm->rank, top.pos, nm->new_id});
        std::push_heap(queue.begin(), queue.end(), later);
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
  return {};
}

}  // namespace vpod::tokenizer
