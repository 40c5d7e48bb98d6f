// The attention planner: turns one step's HybridBatch into work lists (prefill
// tiles, decode items, KV splits and their combines) once, on the CPU. Every
// layer of the step reuses the plan; see docs/attention.md for the heuristics.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention.h"

namespace vpod::attention {
namespace {

// A split must keep at least this many key blocks, so the fixed cost of a CTA
// (Q load, pipeline fill, partial write) stays small beside its main loop.
constexpr int kMinPrefillBlocksPerSplit = 4;
constexpr int kMaxPrefillSplits = 32;
constexpr int kMaxDecodeSplits = 64;
// Costs in "key blocks processed by one CTA slot". A CTA's start and end
// (Q load, pipeline fill, cross-warp merge) cost about one block; a split adds
// the combine launch and its partial traffic, about two blocks of a 128-dim
// decode (doubled for 64-dim, whose blocks are half as long).
constexpr double kDecodeCtaOverheadBlocks = 1.0;
// Prefill costs, per kernel, in key blocks of one CTA slot: a CTA's (a work
// unit's) fixed cost, and what a KV split adds, the combine launch and the
// fp32 partial rows' write and read. `split_below_waves`: the grids the
// planner considers splitting (fewer CTAs than this many waves of slots);
// `max_waves`: the most waves a split may make.
struct PrefillCosts {
  double cta_overhead_blocks;
  double combine_launch_blocks;
  double partial_bytes_per_block;
  int split_below_waves;
  int max_waves;
};
// The tile kernels, kPrefillCtasPerSm CTAs per SM: a CTA's Q load and output
// write cost about one key block, the combine launch ~2 and the partials ~16
// MB per block-time (docs/attention.md, *Measurements behind the code*). A
// grid that fills most of a wave is left alone: splitting it doubles the waves.
constexpr PrefillCosts kTilePrefillCosts{1.0, 2.0, 16.0 * 1024 * 1024, 1, 2};
// The warp-specialized kernel, one persistent CTA per SM, a key block ~0.8 us
// of it: its fixed costs weigh ~8 blocks each (a work unit's boundary is not
// pipelined: Q load, ring refill, epilogue) and the partials ~4 MB per block;
// fitted to forced splits of twelve chunk shapes on the H200, where these
// values pick the fastest split count of each (docs/attention.md, *KV splits
// on the warp-specialized kernel*). Its rounds quantize too (160 CTAs on 132
// SMs run as two), so grids below two waves are considered, and split up to
// four. Grids of two to four waves stay whole: there splitting in two won or
// lost by up to 10%, within twice the run-to-run spread, shape by shape.
constexpr PrefillCosts kWsPrefillCosts{8.0, 8.0, 4.0 * 1024 * 1024, 2, 4};
constexpr double kDecodeCombineOverheadBlocks128 = 2.0;
// The cluster merge of even splits (decode_cluster.cu: two cluster barriers
// and the split rows through distributed shared memory, no fence, atomic or
// L2 round trip) costs about half a block less than the counter merge
// (docs/attention.md, *Measurements behind the code*).
constexpr double kDecodeClusterMergeOverheadBlocks128 = 0.5;
// The deep decode kernel (decode_deep.cu) runs one CTA per SM: alone on its
// SM, a CTA streams a key block in about half the time of a tile CTA that
// shares the SM with another (decode is bound by HBM bandwidth per SM, not by
// the CTA), so its blocks cost half in the tile kernel's slot time.
constexpr int kDecodeDeepCtasPerSm = 1;
constexpr double kDecodeDeepBlockCost = 0.5;
// Above this many CTAs, wave quantization is a few percent and the makespan is
// estimated from the total instead of simulated.
constexpr std::size_t kMaxSimulatedCtas = 8192;
// Grid dimension y holds the work items.
constexpr std::size_t kMaxGridY = 65535;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

std::size_t align_up(std::size_t value, std::size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

Status validate_batch(const HybridBatch& batch) {
  int offset = 0;
  for (std::size_t i = 0; i < batch.prefills.size(); ++i) {
    const BatchSequence& s = batch.prefills[i];
    if (s.num_new < 1 || s.cached_len < 0 || s.slot < 0) {
      return invalid_argument(
          fmt::format("prefill {}: needs num_new >= 1, cached_len >= 0, slot >= 0 (got {}, {}, {})",
                      i, s.num_new, s.cached_len, s.slot));
    }
    if (s.token_offset != offset) {
      return invalid_argument(fmt::format(
          "prefill {}: token_offset {} but its tokens start at row {} of the flattened batch", i,
          s.token_offset, offset));
    }
    offset += s.num_new;
  }
  for (std::size_t i = 0; i < batch.decodes.size(); ++i) {
    const BatchSequence& s = batch.decodes[i];
    if (s.num_new != 1 || s.cached_len < 0 || s.slot < 0) {
      return invalid_argument(
          fmt::format("decode {}: needs num_new == 1, cached_len >= 0, slot >= 0 (got {}, {}, {})",
                      i, s.num_new, s.cached_len, s.slot));
    }
    if (s.token_offset != offset) {
      return invalid_argument(
          fmt::format("decode {}: token_offset {} but its token is row {} of the flattened batch",
                      i, s.token_offset, offset));
    }
    offset += 1;
  }
  return Status();
}

SequenceDesc describe(const BatchSequence& s) {
  return SequenceDesc{s.slot, s.cached_len, s.num_new, s.token_offset};
}

// Longest-processing-time-first makespan of `costs` (sorted descending) on
// `slots` identical CTA slots. Costs come in runs of equal values (every head
// of a tile, every full split of a context), so the simulation keeps the
// slots as (finish time, count) and places a run on all the slots that free
// first at once: the same schedule as placing one CTA at a time, in far fewer
// steps (this runs for every split candidate of every step). `free_at` is the
// caller's memory: sorted by finish time, latest first, one entry per time.
double estimate_makespan(const std::vector<double>& costs, int slots,
                         std::vector<std::pair<double, long long>>& free_at) {
  if (costs.empty()) return 0.0;
  if (costs.size() > kMaxSimulatedCtas) {
    double total = 0.0;
    for (double c : costs) total += c;
    return total / slots + costs.front();
  }
  free_at.clear();
  free_at.push_back({0.0, std::max(slots, 1)});
  auto add = [&](double at, long long count) {
    auto it = std::lower_bound(free_at.begin(), free_at.end(), at,
                               [](const auto& entry, double t) { return entry.first > t; });
    if (it != free_at.end() && it->first == at) {
      it->second += count;
    } else {
      free_at.insert(it, {at, count});
    }
  };
  double makespan = 0.0;
  for (std::size_t i = 0; i < costs.size();) {
    const double cost = costs[i];
    std::size_t run = 1;
    while (i + run < costs.size() && costs[i + run] == cost) ++run;
    i += run;
    for (long long left = static_cast<long long>(run); left > 0;) {
      const double start = free_at.back().first;
      const long long placed = std::min(left, free_at.back().second);
      if ((free_at.back().second -= placed) == 0) free_at.pop_back();
      add(start + cost, placed);
      left -= placed;
      makespan = std::max(makespan, start + cost);
    }
  }
  return makespan;
}

// std::stable_sort's order (ties keep their positions) without its
// temporary allocation: a bottom-up merge sort through `buffer`, the caller's
// memory, which keeps its capacity between plans.
template <typename T, typename Less>
void stable_sort_with(std::vector<T>& items, std::vector<T>& buffer, Less less) {
  const std::size_t n = items.size();
  buffer.resize(n);
  std::vector<T>* from = &items;
  std::vector<T>* to = &buffer;
  for (std::size_t width = 1; width < n; width *= 2) {
    for (std::size_t lo = 0; lo < n; lo += 2 * width) {
      const std::size_t mid = std::min(lo + width, n), hi = std::min(lo + 2 * width, n);
      std::merge(from->begin() + lo, from->begin() + mid, from->begin() + mid, from->begin() + hi,
                 to->begin() + lo, less);
    }
    std::swap(from, to);
  }
  if (from != &items) std::copy(buffer.begin(), buffer.end(), items.begin());
}

}  // namespace

Status validate_dims(const AttentionDims& dims) {
  if (dims.num_q_heads < 1 || dims.num_kv_heads < 1) {
    return invalid_argument(fmt::format("attention needs >= 1 query and KV head (got {} and {})",
                                        dims.num_q_heads, dims.num_kv_heads));
  }
  if (dims.num_q_heads % dims.num_kv_heads != 0) {
    return invalid_argument(fmt::format("{} query heads are not a multiple of {} KV heads",
                                        dims.num_q_heads, dims.num_kv_heads));
  }
  if (dims.head_dim != 64 && dims.head_dim != 128) {
    return unimplemented(
        fmt::format("attention head_dim {} is not supported (64 or 128)", dims.head_dim));
  }
  if (dims.dtype != DType::f16 && dims.dtype != DType::bf16) {
    return unimplemented(
        fmt::format("attention dtype {} is not supported (fp16 or bf16)", dtype_name(dims.dtype)));
  }
  return Status();
}

int AttentionPlan::decode_head_chunks() const { return ceil_div(dims_.group_size(), kDecodeRows); }

int AttentionPlan::decode_ctas_per_item() const {
  const int units = dims_.num_kv_heads * decode_head_chunks();
  return decode_kernel_ == DecodeKernel::heads ? ceil_div(units, kDecodeHeadsPerCta) : units;
}

Result<AttentionPlan> AttentionPlan::create(const HybridBatch& batch, const AttentionDims& dims,
                                            const PlanOptions& options) {
  AttentionPlan plan;
  VPOD_RETURN_IF_ERROR(plan.build(batch, dims, options));
  return plan;
}

void AttentionPlan::clear() {
  num_prefill_tokens_ = num_decode_tokens_ = 0;
  max_slot_ = max_context_len_ = 0;
  prefill_seqs_.clear();
  decode_seqs_.clear();
  prefill_items_.clear();
  decode_items_.clear();
  prefill_combines_.clear();
  decode_combines_.clear();
  token_slots_.clear();
  partial_rows_ = 0;
  prefill_pack_ = 1;
  prefill_packed_items_ = 0;
  prefill_pack_mixed_ = false;
  ws_tiles_ = 0;
  decode_kernel_ = DecodeKernel::tile;
  decode_cluster_size_ = 0;
  layout_ = PlanLayout{};
  metadata_.clear();
}

Status AttentionPlan::build(const HybridBatch& batch, const AttentionDims& dims,
                            const PlanOptions& options) {
  clear();
  VPOD_RETURN_IF_ERROR(validate_dims(dims));
  if (options.num_sms < 1) return invalid_argument("PlanOptions::num_sms must be >= 1");
  if (options.prefill_splits < 0 || options.decode_splits < 0) {
    return invalid_argument("PlanOptions split counts must be >= 0");
  }
  VPOD_RETURN_IF_ERROR(validate_batch(batch));

  AttentionPlan& plan = *this;
  Scratch& scratch = scratch_;
  plan.dims_ = dims;
  plan.kernels_ = options.kernels;
  // Automatic: chosen per batch below, starting from the tile kernel.
  const bool automatic = options.decode_kernel == DecodeKernel::automatic;
  plan.decode_kernel_ = automatic ? DecodeKernel::tile : options.decode_kernel;
  plan.num_prefill_tokens_ = batch.num_prefill_tokens();
  plan.num_decode_tokens_ = batch.num_decode_tokens();
  for (const auto* list : {&batch.prefills, &batch.decodes}) {
    for (const BatchSequence& s : *list) {
      plan.max_slot_ = std::max(plan.max_slot_, s.slot);
      plan.max_context_len_ = std::max(plan.max_context_len_, s.context_len());
      for (int i = 0; i < s.num_new; ++i) plan.token_slots_.push_back({s.slot, s.cached_len + i});
    }
  }
  for (const BatchSequence& s : batch.prefills) plan.prefill_seqs_.push_back(describe(s));
  for (const BatchSequence& s : batch.decodes) plan.decode_seqs_.push_back(describe(s));

  // ---- Prefill: one tile per kPrefillBlockM query rows of a chunk. When the
  // tiles fill the prefill kernel's slots badly (a short chunk on a long
  // context), each tile's keys are split, into as many ranges (of at least
  // kMinPrefillBlocksPerSplit blocks) as give the smallest estimated makespan
  // on the slots of the kernel that runs (PrefillCosts), counting each CTA's
  // fixed cost and the combine a split needs.
  std::vector<Tile>& tiles = scratch.tiles;
  tiles.clear();
  for (int i = 0; i < static_cast<int>(batch.prefills.size()); ++i) {
    const BatchSequence& s = batch.prefills[i];
    for (int q = 0; q < s.num_new; q += kPrefillBlockM) {
      const int rows = std::min(kPrefillBlockM, s.num_new - q);
      const int kv_end = s.cached_len + q + rows;  // causal bound of the tile's last row
      tiles.push_back({i, q, rows, kv_end, ceil_div(kv_end, kPrefillBlockN)});
    }
  }
  // GQA packing: a tile short enough for a KV head's whole group of query
  // heads packs (PrefillWorkItem::pack) where the step's walk packs
  // (gqa_packable_tiles_pack, decided before the splits so that the split
  // estimate counts the CTAs the kernel runs). The warp-specialized kernel
  // then runs one CTA per (packed tile, KV head), each costing what a
  // one-head CTA costs; prefill_pack() says whether every tile packs.
  const int group = dims.group_size();
  const bool walk_packs = gqa_packable_tiles_pack(
      [&](auto&& f) {
        for (const Tile& t : tiles) f(t.rows, t.blocks);
      },
      dims.num_q_heads, dims.num_kv_heads);
  auto packs = [&](const Tile& t) { return walk_packs && gqa_tile_packs(t.rows, group); };
  int packed_tiles = 0;
  for (const Tile& t : tiles) packed_tiles += packs(t) ? 1 : 0;
  plan.prefill_pack_ = !tiles.empty() && packed_tiles == static_cast<int>(tiles.size()) ? group : 1;
  const KernelOptions& kernels = options.kernels;
  const bool kernel_packs = kernels.wgmma_prefill && kernels.ws_prefill && kernels.ws_gqa_pack;
  auto tile_ctas = [&](const Tile& t) {
    return kernel_packs && packs(t) ? dims.num_kv_heads : dims.num_q_heads;
  };
  const bool ws = ws_prefill_runs(kernels, options.ws_prefill_ctas_per_sm);
  const PrefillCosts& cost_model = ws ? kWsPrefillCosts : kTilePrefillCosts;
  const int prefill_slots =
      options.num_sms * (ws ? options.ws_prefill_ctas_per_sm : kPrefillCtasPerSm);
  long long base_ctas = 0;
  for (const Tile& t : tiles) base_ctas += tile_ctas(t);
  auto tile_splits = [&](const Tile& t, int target) {
    int splits = target;
    if (options.prefill_splits == 0) {
      splits = std::min(splits, std::max(1, t.blocks / kMinPrefillBlocksPerSplit));
    }
    splits = std::clamp(splits, 1, t.blocks);
    return ceil_div(t.blocks, ceil_div(t.blocks, splits));  // no empty split
  };
  int split_target = 1;
  if (options.prefill_splits > 0) {
    split_target = options.prefill_splits;
  } else if (base_ctas > 0 &&
             base_ctas < static_cast<long long>(cost_model.split_below_waves) * prefill_slots) {
    double best_time = -1.0;
    // Beyond max_waves waves of CTAs a finer split only adds fixed costs.
    const long long wave_ctas = static_cast<long long>(cost_model.max_waves) * prefill_slots;
    const int max_target = static_cast<int>(
        std::min<long long>(kMaxPrefillSplits, (wave_ctas + base_ctas - 1) / base_ctas));
    std::vector<double>& costs = scratch.costs;
    for (int target = 1; target <= max_target; ++target) {
      costs.clear();
      double partial_bytes = 0.0;
      for (const Tile& t : tiles) {
        const int splits = tile_splits(t, target);
        if (splits > 1) {
          partial_bytes += 2.0 * splits * t.rows * dims.num_q_heads * (dims.head_dim + 1) * 4.0;
        }
        const int per = ceil_div(t.blocks, splits);
        const int ctas = tile_ctas(t);
        for (int j = 0; j < splits; ++j) {
          const int b = std::min(per, t.blocks - j * per);
          for (int h = 0; h < ctas; ++h) costs.push_back(b + cost_model.cta_overhead_blocks);
        }
      }
      std::sort(costs.begin(), costs.end(), std::greater<double>());
      const double time =
          estimate_makespan(costs, prefill_slots, scratch.free_slots) +
          (partial_bytes > 0.0 ? cost_model.combine_launch_blocks +
                                     partial_bytes / cost_model.partial_bytes_per_block
                               : 0.0);
      if (best_time < 0.0 || time < best_time - 1e-9) {
        best_time = time;
        split_target = target;
      }
    }
  }
  for (const Tile& t : tiles) {
    const int splits = tile_splits(t, split_target);
    const int per_split = ceil_div(t.blocks, splits);
    int partial_base = -1;
    if (splits > 1) {
      partial_base = plan.partial_rows_;
      plan.partial_rows_ += splits * t.rows;
      const SequenceDesc& s = plan.prefill_seqs_[t.seq];
      for (int r = 0; r < t.rows; ++r) {
        plan.prefill_combines_.push_back(
            {s.token_offset + t.q_begin + r, splits, partial_base + r, t.rows});
      }
    }
    for (int j = 0; j < splits; ++j) {
      const int kv_begin = j * per_split * kPrefillBlockN;
      const int kv_end = std::min((j + 1) * per_split * kPrefillBlockN, t.kv_end);
      plan.prefill_items_.push_back(
          {t.seq, t.q_begin, kv_begin, kv_end, splits > 1 ? partial_base + j * t.rows : -1, j,
           splits, ceil_div(kv_end - kv_begin, kPrefillBlockN), packs(t) ? group : 1, 0});
    }
  }
  // Longest first: the causal tiles near the end of a long prompt start in the
  // first wave, the short ones fill the tail.
  stable_sort_with(
      plan.prefill_items_, scratch.prefill_items,
      [](const PrefillWorkItem& a, const PrefillWorkItem& b) { return a.cost > b.cost; });
  // The warp-specialized kernel's walk when it packs per item: each item's
  // first tile.
  plan.prefill_packed_items_ = 0;
  plan.ws_tiles_ = 0;
  for (PrefillWorkItem& item : plan.prefill_items_) {
    item.ws_tile = plan.ws_tiles_;
    plan.ws_tiles_ += item.pack > 1 ? dims.num_kv_heads : dims.num_q_heads;
    plan.prefill_packed_items_ += item.pack > 1 ? 1 : 0;
  }
  const int num_items = static_cast<int>(plan.prefill_items_.size());
  plan.prefill_pack_mixed_ =
      plan.prefill_packed_items_ > 0 && plan.prefill_packed_items_ < num_items;

  // ---- Decode: split every context into chunks of `chunk` key blocks. The
  // chunk is the one with the smallest estimated makespan of the decode grid
  // on num_sms * kDecodeCtasPerSm CTA slots, counting each CTA's fixed cost
  // and the merge a split needs (the counter merge, or the cheaper cluster
  // merge where every decode gets the same 2..8 splits).
  // A heads CTA reads the keys of up to kDecodeHeadsPerCta units: its cost is
  // that many one-head blocks per key block, and there are that many times
  // fewer CTAs. A deep CTA (one per SM) costs half a block per key block on
  // num_sms slots and merges its splits (if any) through the counters.
  const int units = dims.num_kv_heads * plan.decode_head_chunks();
  const double combine_overhead = kDecodeCombineOverheadBlocks128 * 128.0 / dims.head_dim;
  const double cluster_overhead = kDecodeClusterMergeOverheadBlocks128 * 128.0 / dims.head_dim;
  const bool cluster_merge = options.decode_cluster_merge;
  std::vector<int>& decode_blocks = scratch.decode_blocks;
  decode_blocks.clear();
  int max_blocks = 0;
  for (const BatchSequence& s : batch.decodes) {
    decode_blocks.push_back(ceil_div(s.context_len(), kDecodeBlockN));
    max_blocks = std::max(max_blocks, decode_blocks.back());
  }
  auto splits_for = [&](int blocks, int chunk) { return ceil_div(blocks, chunk); };
  // The splits every decode gets with `chunk` when they all get the same
  // number of 2..kMaxDecodeClusterSize, else 0: the splits a cluster merges.
  auto cluster_splits = [&](int chunk) {
    int common = -1;
    for (int blocks : decode_blocks) {
      const int splits = splits_for(blocks, chunk);
      common = common < 0 || common == splits ? splits : 0;
    }
    return common >= 2 && common <= kMaxDecodeClusterSize ? common : 0;
  };
  struct DecodeChoice {
    int chunk = 0;
    long long ctas = 0;
    double time = 0.0;     // estimated makespan in key-block times of a tile CTA slot
    bool cluster = false;  // the splits merge as clusters (estimated faster than the counters)
  };
  // The chunk (key blocks per split) for one kernel, its grid's CTAs and estimate.
  auto choose_chunk = [&](DecodeKernel kernel) {
    const bool heads = kernel == DecodeKernel::heads;
    const bool deep = kernel == DecodeKernel::tile_deep;
    const int ctas_per_item = heads ? ceil_div(units, kDecodeHeadsPerCta) : units;
    const int units_per_cta = heads ? std::min(kDecodeHeadsPerCta, units) : 1;
    const int slots = options.num_sms * (deep ? kDecodeDeepCtasPerSm : kDecodeCtasPerSm);
    const double block_cost = deep ? kDecodeDeepBlockCost : 1.0;
    // Estimated makespan with `chunk`; `cluster_merged`: whether the cluster
    // merge beats the counter merge there.
    auto estimate = [&](int chunk, bool& cluster_merged) {
      cluster_merged = false;
      std::vector<double>& costs = scratch.costs;
      costs.clear();
      bool any_split = false;
      for (int blocks : decode_blocks) {
        const int splits = splits_for(blocks, chunk);
        any_split = any_split || splits > 1;
        const int per = ceil_div(blocks, splits);
        for (int j = 0; j < splits; ++j) {
          const int b = std::min(per, blocks - j * per);
          for (int h = 0; h < ctas_per_item; ++h) {
            costs.push_back(b * units_per_cta * block_cost + kDecodeCtaOverheadBlocks);
          }
        }
      }
      std::sort(costs.begin(), costs.end(), std::greater<double>());
      const double plain = estimate_makespan(costs, slots, scratch.free_slots);
      if (!any_split) return plain;
      const int cluster = cluster_merge && !deep ? cluster_splits(chunk) : 0;
      if (cluster > 0) {
        // A cluster launch gets the slots whole clusters fit in: 256 CTAs in
        // clusters of 8 are two waves on the H200's 240 such slots, one wave
        // of its 264 plain ones, where the counter merge is the faster one
        // (decode 4 x 16384 with 8 KV heads).
        const int cluster_slots = options.decode_cluster_slots[cluster];
        const double clustered = (cluster_slots > 0 && cluster_slots < slots
                                      ? estimate_makespan(costs, cluster_slots, scratch.free_slots)
                                      : plain) +
                                 cluster_overhead;
        if (clustered <= plain + combine_overhead) {
          cluster_merged = true;
          return clustered;
        }
      }
      return plain + combine_overhead;
    };
    DecodeChoice best{std::max(max_blocks, 1), 0, -1.0};
    if (options.decode_splits > 0) {
      best.chunk = std::max(1, ceil_div(max_blocks, options.decode_splits));
    } else if (!decode_blocks.empty()) {
      int last_chunk = -1;
      for (int n = 1; n <= kMaxDecodeSplits; ++n) {
        const int chunk = std::max(1, ceil_div(max_blocks, n));
        if (chunk == last_chunk) continue;
        last_chunk = chunk;
        long long ctas = 0;
        for (int blocks : decode_blocks) ctas += splits_for(blocks, chunk);
        ctas *= ctas_per_item;
        // Beyond four waves a finer split only adds fixed costs (and planning time).
        if (n > 1 && ctas > 4LL * slots) break;
        bool clustered = false;
        const double time = estimate(chunk, clustered);
        if (best.time < 0.0 || time < best.time - 1e-9) {
          best.time = time;
          best.chunk = chunk;
          best.cluster = clustered;
        }
      }
    }
    if (best.time < 0.0 && !decode_blocks.empty()) best.time = estimate(best.chunk, best.cluster);
    for (int blocks : decode_blocks) best.ctas += splits_for(blocks, best.chunk);
    best.ctas *= ctas_per_item;
    return best;
  };
  DecodeChoice choice = choose_chunk(plan.decode_kernel_);
  // Automatic: the heads kernel when the tile grid runs more than one wave of
  // CTA slots and the heads grid (4x fewer CTAs) fits in one; where heads
  // would run two waves or the tile grid is one wave, the tile kernel is as
  // fast or faster (measurements: docs/attention.md, *The plan*).
  const int decode_slots = options.num_sms * kDecodeCtasPerSm;
  if (automatic && options.decode_splits == 0 && choice.ctas > decode_slots) {
    const DecodeChoice heads = choose_chunk(DecodeKernel::heads);
    if (heads.ctas <= decode_slots) {
      plan.decode_kernel_ = DecodeKernel::heads;
      choice = heads;
    }
  }
  // Automatic: the deep kernel when the tile plan splits the decodes but
  // unsplit they fit one CTA per SM and are estimated faster so (no merge at
  // all): 16 x 16K with 8 KV heads, 128 units on 132 SMs (docs/attention.md).
  if (automatic && options.decode_splits == 0 && plan.decode_kernel_ == DecodeKernel::tile &&
      choice.chunk < max_blocks) {
    const DecodeChoice deep = choose_chunk(DecodeKernel::tile_deep);
    if (deep.chunk >= max_blocks && deep.ctas <= options.num_sms * kDecodeDeepCtasPerSm &&
        deep.time < choice.time - 1e-9) {
      plan.decode_kernel_ = DecodeKernel::tile_deep;
      choice = deep;
    }
  }
  const int best_chunk = choice.chunk;
  // Cluster merge: every decode in the same number of splits,
  // 2..kMaxDecodeClusterSize (a cluster's CTAs share one launch's cluster
  // shape), tile or heads kernel. Its items are grouped by decode, longest
  // first.
  if (cluster_merge && plan.decode_kernel_ != DecodeKernel::tile_deep && choice.cluster) {
    plan.decode_cluster_size_ = cluster_splits(best_chunk);
  }
  std::vector<int>& decode_order = scratch.decode_order;
  decode_order.clear();
  for (int i = 0; i < static_cast<int>(batch.decodes.size()); ++i) decode_order.push_back(i);
  if (plan.decode_cluster_size_ > 0) {
    stable_sort_with(decode_order, scratch.sorted_order, [&](int a, int b) {
      return batch.decodes[a].context_len() > batch.decodes[b].context_len();
    });
  }
  for (int i : decode_order) {
    const int blocks = decode_blocks[i];
    const int ctx = batch.decodes[i].context_len();
    const int splits = splits_for(blocks, best_chunk);
    const int per = ceil_div(blocks, splits);
    int partial_base = -1;
    if (splits > 1) {
      partial_base = plan.partial_rows_;
      plan.partial_rows_ += splits;
      plan.decode_combines_.push_back({batch.decodes[i].token_offset, splits, partial_base, 1});
    }
    for (int j = 0; j < splits; ++j) {
      const int kv_begin = j * per * kDecodeBlockN;
      VPOD_CHECK(kv_begin < ctx);  // (splits - 1) * per < blocks: no split is empty
      const int kv_end = std::min((j + 1) * per * kDecodeBlockN, ctx);
      plan.decode_items_.push_back(
          {i, kv_begin, kv_end, splits > 1 ? partial_base + j : -1,
           splits > 1 ? static_cast<std::int32_t>(plan.decode_combines_.size()) - 1 : -1,
           batch.decodes[i].slot, batch.decodes[i].token_offset, 0});
    }
  }
  if (plan.decode_cluster_size_ == 0) {
    stable_sort_with(plan.decode_items_, scratch.decode_items,
                     [](const DecodeWorkItem& a, const DecodeWorkItem& b) {
                       return a.kv_end - a.kv_begin > b.kv_end - b.kv_begin;
                     });
  }

  if (plan.prefill_items_.size() > kMaxGridY || plan.decode_items_.size() > kMaxGridY) {
    const Status error =
        out_of_range(fmt::format("attention plan has {} prefill and {} decode work items; at "
                                 "most {} each fit one launch",
                                 plan.prefill_items_.size(), plan.decode_items_.size(), kMaxGridY));
    clear();
    return error;
  }
  plan.build_metadata();
  return Status();
}

void AttentionPlan::build_metadata() {
  constexpr std::size_t kAlign = 16;
  std::size_t offset = 0;
  auto place = [&](std::size_t bytes) {
    const std::size_t at = offset;
    offset = align_up(offset + bytes, kAlign);
    return at;
  };
  layout_.prefill_seqs = place(prefill_seqs_.size() * sizeof(SequenceDesc));
  layout_.decode_seqs = place(decode_seqs_.size() * sizeof(SequenceDesc));
  layout_.prefill_items = place(prefill_items_.size() * sizeof(PrefillWorkItem));
  layout_.decode_items = place(decode_items_.size() * sizeof(DecodeWorkItem));
  layout_.prefill_combines = place(prefill_combines_.size() * sizeof(CombineItem));
  layout_.decode_combines = place(decode_combines_.size() * sizeof(CombineItem));
  layout_.token_slots = place(token_slots_.size() * sizeof(TokenSlot));
  layout_.total = offset;
  metadata_.assign(offset, std::byte{0});
  auto copy = [&](std::size_t at, const auto& v) {
    if (!v.empty()) std::memcpy(metadata_.data() + at, v.data(), v.size() * sizeof(v[0]));
  };
  copy(layout_.prefill_seqs, prefill_seqs_);
  copy(layout_.decode_seqs, decode_seqs_);
  copy(layout_.prefill_items, prefill_items_);
  copy(layout_.decode_items, decode_items_);
  copy(layout_.prefill_combines, prefill_combines_);
  copy(layout_.decode_combines, decode_combines_);
  copy(layout_.token_slots, token_slots_);
}

std::size_t AttentionPlan::decode_counter_count() const {
  return decode_combines_.size() * static_cast<std::size_t>(dims_.num_kv_heads) *
         static_cast<std::size_t>(decode_head_chunks());
}

std::size_t AttentionPlan::workspace_bytes() const {
  const std::size_t rows = static_cast<std::size_t>(partial_rows_) * dims_.num_q_heads;
  return align_up(rows * dims_.head_dim * sizeof(float), 256) +
         align_up(rows * sizeof(float), 256) +
         align_up(decode_counter_count() * sizeof(std::int32_t), 256);
}

PlanPointers AttentionPlan::pointers(const AttentionBuffers& buffers) const {
  PlanPointers p;
  auto* base = static_cast<std::byte*>(buffers.metadata);
  if (base != nullptr) {
    p.prefill_seqs = reinterpret_cast<const SequenceDesc*>(base + layout_.prefill_seqs);
    p.decode_seqs = reinterpret_cast<const SequenceDesc*>(base + layout_.decode_seqs);
    p.prefill_items = reinterpret_cast<const PrefillWorkItem*>(base + layout_.prefill_items);
    p.decode_items = reinterpret_cast<const DecodeWorkItem*>(base + layout_.decode_items);
    p.prefill_combines = reinterpret_cast<const CombineItem*>(base + layout_.prefill_combines);
    p.decode_combines = reinterpret_cast<const CombineItem*>(base + layout_.decode_combines);
    p.token_slots = reinterpret_cast<const TokenSlot*>(base + layout_.token_slots);
  }
  if (buffers.workspace != nullptr && partial_rows_ > 0) {
    const std::size_t rows = static_cast<std::size_t>(partial_rows_) * dims_.num_q_heads;
    auto* ws = static_cast<std::byte*>(buffers.workspace);
    p.partial_o = reinterpret_cast<float*>(ws);
    p.partial_lse =
        reinterpret_cast<float*>(ws + align_up(rows * dims_.head_dim * sizeof(float), 256));
    if (decode_counter_count() > 0) {
      p.decode_counters = reinterpret_cast<std::int32_t*>(
          ws + align_up(rows * dims_.head_dim * sizeof(float), 256) +
          align_up(rows * sizeof(float), 256));
    }
  }
  return p;
}

Status AttentionPlan::upload(const AttentionBuffers& buffers, cudaStream_t stream) const {
  if (metadata_.empty()) return Status();
  if (buffers.metadata == nullptr || buffers.metadata_bytes < metadata_.size()) {
    return invalid_argument(
        fmt::format("attention metadata buffer holds {} bytes; the plan needs {}",
                    buffers.metadata == nullptr ? 0 : buffers.metadata_bytes, metadata_.size()));
  }
  VPOD_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(buffers.metadata, metadata_.data(), metadata_.size(),
                                  cudaMemcpyHostToDevice, stream),
                  "cudaMemcpyAsync(attention plan metadata)"));
  if (decode_counter_count() == 0) return Status();
  // The decode splits' arrival counters start at zero; the kernel resets them.
  if (buffers.workspace == nullptr || buffers.workspace_bytes < workspace_bytes()) {
    return invalid_argument(fmt::format("attention workspace holds {} bytes; the plan needs {}",
                                        buffers.workspace == nullptr ? 0 : buffers.workspace_bytes,
                                        workspace_bytes()));
  }
  return cuda_status(cudaMemsetAsync(pointers(buffers).decode_counters, 0,
                                     decode_counter_count() * sizeof(std::int32_t), stream),
                     "cudaMemsetAsync(attention decode counters)");
}

}  // namespace vpod::attention
