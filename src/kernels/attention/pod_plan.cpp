// The POD planner: once per step, on the CPU, it chooses the KV splits of the
// prefill tiles and decodes, the ratio policy and whether the fused kernel
// beats the serial kernels, by simulating the fused kernel's schedule (the
// fluid model), then builds the work lists through AttentionPlan with those
// splits forced. docs/pod.md gives the model, its calibration and measurements.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/attention/pod.h"
#include "kernels/attention/pod_params.h"

namespace vpod::attention {
namespace {

// Prefill: at most this many KV splits per tile, each of >= 4 key blocks.
constexpr int kMaxPodPrefillSplits = 8;
constexpr int kMinPrefillBlocksPerSplit = 4;
// Prefill splits beyond the ~2 x SMs limit need this estimated gain.
constexpr double kBeyondLimitGain = 0.05;
// Decode: at most this many KV splits, each of >= 4 key blocks (256 keys).
constexpr int kMaxPodDecodeSplits = 16;
constexpr int kMinDecodeBlocksPerSplit = 4;
// Cost model, in microseconds of one CTA slot, calibrated on the H200
// (docs/pod.md, *The model*): the time of a 128x64 prefill block of a 128-dim
// tile with two CTAs per SM, on the mma.sync tile and on the wgmma tile; it
// scales with head_dim. A CTA's start and end cost about one block; a split
// adds a combine launch and the fp32 partial rows' write and read.
constexpr double kPrefillBlockUs128 = 4.3;
constexpr double kWgmmaPrefillBlockUs128 = 2.6;
// The serial estimate divides the tile's block cost by this where the
// warp-specialized standalone prefill (prefill_ws.cuh) runs. It is fitted to
// the fallback's choices on a measured sweep, not to the two kernels'
// standalone ratio, which is larger: both estimates run high (docs/pod.md,
// *Is kWsPrefillSpeedup still right?*).
constexpr double kWsPrefillSpeedup = 1.15;
constexpr double kCombineLaunchUs = 4.0;
constexpr double kPartialBytesPerUs = 3.0e6;  // ~3 TB/s
// The decode CTAs share the HBM bandwidth: 136 blocks of 64 keys (32 KB at
// head_dim 128) per us in all, each CTA at most 0.85 blocks per us (a decode
// CTA alone cannot stream faster). So decode CTAs run faster while prefill
// CTAs hold the other slots: the overlap POD exists for.
constexpr double kFluidBandwidthBlocksPerUs128 = 136.0;
constexpr double kFluidCtaBlocksPerUs128 = 0.85;
// More KV splits (prefill or decode) are taken only for at least this
// estimated gain: a split the estimate favours by < 1% tends to run slower
// (its merge and per-CTA costs are underrated; docs/pod.md).
constexpr double kSplitGain = 0.015;
// The other ratio policy is taken for at least this estimated gain.
constexpr double kRatioSwitchGain = 0.02;
// Decode split candidates stop once the decode CTAs exceed this many waves.
constexpr long long kFluidMaxDecodeWaves = 4;
// Beyond this many waves of (grouped) CTAs the simulation gives way to the
// closed form (planning time).
constexpr std::size_t kMaxFluidWaves = 16;

using Scratch = PodPlan::Scratch;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The fused kernel's schedule as the device runs it: `num_sms` SMs of
// `ctas_per_sm` slots. The grid's CTAs start by rounds (every SM's first slot,
// then every second one), then one wherever a slot frees. Each takes its SM's
// next ticket, the kind pod_ticket_kind gives it (the kernel's own rule), and
// the next unit of that kind, or of the other kind once that one is
// exhausted. Units run in plan order, which is longest first within a kind.
// `prefill_us` are prefill CTA times, `decode_blocks` decode CTA work in
// blocks (both in plan order); the running decode CTAs each progress at
// min(cta_rate, bandwidth / running). Returns the makespan (us).
double simulate_fluid(const std::vector<double>& prefill_us,
                      const std::vector<double>& decode_blocks, int num_sms, int ctas_per_sm,
                      bool even, double bandwidth, double cta_rate, Scratch& scratch) {
  const std::size_t counts[2] = {prefill_us.size(), decode_blocks.size()};
  const std::size_t grid = counts[0] + counts[1];
  if (grid == 0) return 0.0;
  const std::size_t slots = static_cast<std::size_t>(num_sms) * ctas_per_sm;
  if (grid > kMaxFluidWaves * slots) {
    double prefill = 0.0, decode = 0.0;
    for (double c : prefill_us) prefill += c;
    for (double c : decode_blocks) decode += c;
    const double longest = std::max(counts[0] ? prefill_us.front() : 0.0,
                                    counts[1] ? decode_blocks.front() / cta_rate : 0.0);
    return std::max(
        {longest, (prefill + decode / cta_rate) / static_cast<double>(slots), decode / bandwidth});
  }
  std::vector<unsigned>& tickets = scratch.tickets;
  tickets.assign(num_sms, 0u);
  std::size_t next[2] = {0, 0};
  using Entry = std::pair<double, int>;  // prefill: finish time; decode: finish work; SM
  std::vector<Entry>& prefill_heap = scratch.prefill_heap;
  std::vector<Entry>& decode_heap = scratch.decode_heap;
  prefill_heap.clear();
  decode_heap.clear();
  const auto later = std::greater<Entry>();
  double now = 0.0, work = 0.0;  // work: blocks done by each running decode CTA so far
  auto start = [&](int sm) {
    int kind = pod_ticket_kind(tickets[sm]++, static_cast<int>(counts[0]),
                               static_cast<int>(counts[1]), even);
    if (next[kind] >= counts[kind]) kind ^= 1;
    if (next[kind] >= counts[kind]) return;
    if (kind == 0) {
      prefill_heap.push_back({now + prefill_us[next[0]++], sm});
      std::push_heap(prefill_heap.begin(), prefill_heap.end(), later);
    } else {
      decode_heap.push_back({work + decode_blocks[next[1]++], sm});
      std::push_heap(decode_heap.begin(), decode_heap.end(), later);
    }
  };
  for (int round = 0; round < ctas_per_sm; ++round) {
    for (int sm = 0; sm < num_sms; ++sm) start(sm);
  }
  while (!prefill_heap.empty() || !decode_heap.empty()) {
    const double rate =
        decode_heap.empty()
            ? 0.0
            : std::min(cta_rate, bandwidth / static_cast<double>(decode_heap.size()));
    const double prefill_end = prefill_heap.empty() ? 1e300 : prefill_heap.front().first;
    const double decode_end =
        decode_heap.empty() ? 1e300 : now + (decode_heap.front().first - work) / rate;
    int sm = 0;
    if (prefill_end <= decode_end) {
      work += (prefill_end - now) * rate;
      now = prefill_end;
      std::pop_heap(prefill_heap.begin(), prefill_heap.end(), later);
      sm = prefill_heap.back().second;
      prefill_heap.pop_back();
    } else {
      work = decode_heap.front().first;
      now = decode_end;
      std::pop_heap(decode_heap.begin(), decode_heap.end(), later);
      sm = decode_heap.back().second;
      decode_heap.pop_back();
    }
    start(sm);
  }
  return now;
}

// Calls f(piece) for the KV pieces (in key blocks) of a range of `blocks`
// blocks forced to `splits`, as AttentionPlan cuts it (no empty piece), and
// returns their number.
template <typename F>
int for_each_piece(int blocks, int splits, F&& f) {
  splits = std::clamp(splits, 1, std::max(blocks, 1));
  const int per = ceil_div(blocks, splits);
  int count = 0;
  for (int start = 0; start < blocks; start += per, ++count) f(std::min(per, blocks - start));
  return count;
}

// The batch in key blocks: prefill tiles (128 query rows each: blocks and
// rows in scratch.tile_blocks / tile_rows) and decodes (scratch.decode_blocks).
struct Shape {
  int max_tile_blocks = 0;
  int max_decode_blocks = 0;
};

Shape describe_batch(const HybridBatch& batch, Scratch& scratch) {
  Shape shape;
  scratch.tile_blocks.clear();
  scratch.tile_rows.clear();
  scratch.decode_blocks.clear();
  for (const BatchSequence& s : batch.prefills) {
    for (int q = 0; q < s.num_new; q += kPrefillBlockM) {
      const int rows = std::min(kPrefillBlockM, s.num_new - q);
      const int blocks = ceil_div(s.cached_len + q + rows, kPrefillBlockN);
      scratch.tile_blocks.push_back(blocks);
      scratch.tile_rows.push_back(rows);
      shape.max_tile_blocks = std::max(shape.max_tile_blocks, blocks);
    }
  }
  for (const BatchSequence& s : batch.decodes) {
    scratch.decode_blocks.push_back(ceil_div(s.context_len(), kDecodeBlockN));
    shape.max_decode_blocks = std::max(shape.max_decode_blocks, scratch.decode_blocks.back());
  }
  return shape;
}

struct Estimate {
  double us = 0;
  int prefill_ctas = 0, decode_tiles = 0, decode_ctas = 0;
};

// The machine the schedule is simulated on.
struct Model {
  bool wgmma_prefill = false;
  bool ws_prefill = false;  // the serial prefill is the warp-specialized kernel
  // ... and packs the query heads of a KV head into one tile for the tiles
  // short enough (AttentionPlan's rule): one CTA per KV head there.
  bool ws_pack = false;
  bool even = false;  // the ratio policy
  int num_sms = 0, ctas_per_sm = 0;
  // CTAs simulated in groups of this many identical ones (the heads of one
  // KV piece) on num_sms / group SMs: the same schedule at a fraction of the
  // planning time. It divides num_sms, the query heads and the decode tiles
  // per piece (1 with two decode tiles per CTA).
  int group = 1;
};

// Which kinds of the batch an estimate runs: both in the fused kernel, or one
// alone (a serial kernel).
enum class Kinds { both, prefill_only, decode_only };

// The makespan of the fused kernel (or of one kind's grid alone) with the
// given splits.
Estimate estimate(const Shape& shape, const AttentionDims& dims, const Model& model,
                  int prefill_splits, int decode_splits, Scratch& scratch,
                  Kinds kinds = Kinds::both) {
  const double scale = dims.head_dim / 128.0;
  const double prefill_block =
      (model.wgmma_prefill ? kWgmmaPrefillBlockUs128 : kPrefillBlockUs128) * scale /
      (kinds == Kinds::prefill_only && model.ws_prefill ? kWsPrefillSpeedup : 1.0);
  const int head_chunks = ceil_div(dims.group_size(), kDecodeRows);
  const int tiles_per_piece = dims.num_kv_heads * head_chunks;
  const bool with_prefill = kinds != Kinds::decode_only;
  const bool with_decode = kinds != Kinds::prefill_only;
  Estimate e;
  // Costs are sorted per KV piece, then expanded to the piece's CTAs (all of
  // a piece's heads cost the same): sorting every CTA was most of the
  // planning time.
  // Pieces as (cost, CTA groups): num_q_heads / group, or num_kv_heads / group
  // for a packed tile of the serial warp-specialized kernel.
  std::vector<std::pair<double, int>>& prefill_pieces = scratch.prefill_pieces;
  std::vector<double>& prefill_costs = scratch.prefill_costs;
  prefill_pieces.clear();
  prefill_costs.clear();
  const int group = model.group;
  // The serial warp-specialized prefill packs where AttentionPlan's walk does.
  const bool packing = kinds == Kinds::prefill_only && model.ws_pack &&
                       gqa_packable_tiles_pack(
                           [&](auto&& f) {
                             for (std::size_t t = 0; t < scratch.tile_blocks.size(); ++t) {
                               f(scratch.tile_rows[t], scratch.tile_blocks[t]);
                             }
                           },
                           dims.num_q_heads, dims.num_kv_heads);
  double partial_bytes = 0;
  bool combine_launch = false;  // prefill splits (decode splits merge in the kernel)
  const double row_bytes = dims.num_q_heads * (dims.head_dim + 1) * 4.0;
  const std::size_t num_tiles = with_prefill ? scratch.tile_blocks.size() : 0;
  for (std::size_t t = 0; t < num_tiles; ++t) {
    const bool packed = packing && gqa_tile_packs(scratch.tile_rows[t], dims.group_size());
    const int copies = (packed ? dims.num_kv_heads : dims.num_q_heads) / group;
    const int count = for_each_piece(scratch.tile_blocks[t], prefill_splits, [&](int b) {
      prefill_pieces.emplace_back((b + 1) * prefill_block, copies);
    });
    if (count > 1) {
      partial_bytes += 2.0 * count * scratch.tile_rows[t] * row_bytes;
      combine_launch = true;
    }
  }
  // Plan order: longest first within each kind (AttentionPlan sorts its items so).
  std::sort(prefill_pieces.begin(), prefill_pieces.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  e.prefill_ctas = 0;
  for (const auto& [c, copies] : prefill_pieces) {
    prefill_costs.insert(prefill_costs.end(), copies, c);
    e.prefill_ctas += copies * group;
  }
  const int max_decode_blocks = with_decode ? shape.max_decode_blocks : 0;
  const int chunk = std::max(1, ceil_div(max_decode_blocks, std::max(decode_splits, 1)));
  // Decode tiles in plan order (longest piece first, the heads of a piece
  // adjacent), one per CTA.
  std::vector<int>& decode_pieces = scratch.decode_pieces;
  decode_pieces.clear();
  if (with_decode) {
    for (int blocks : scratch.decode_blocks) {
      const int count = for_each_piece(blocks, ceil_div(blocks, chunk),
                                       [&](int b) { decode_pieces.push_back(b); });
      // The last split merges in the kernel: no combine launch.
      if (count > 1) partial_bytes += 2.0 * count * row_bytes;
    }
  }
  std::sort(decode_pieces.begin(), decode_pieces.end(), std::greater<int>());
  e.decode_tiles = static_cast<int>(decode_pieces.size()) * tiles_per_piece;
  e.decode_ctas = e.decode_tiles;
  // Decode CTAs as work in blocks; one group of `group` CTAs per entry.
  std::vector<double>& decode_work = scratch.decode_work;
  decode_work.clear();
  const int copies = tiles_per_piece / group;
  for (int b : decode_pieces) decode_work.insert(decode_work.end(), copies, b + 1.0);
  const double rate_scale = 128.0 / dims.head_dim;  // blocks are head_dim / 128 the bytes
  const double span =
      simulate_fluid(prefill_costs, decode_work, model.num_sms / group, model.ctas_per_sm,
                     model.even, kFluidBandwidthBlocksPerUs128 * rate_scale / group,
                     kFluidCtaBlocksPerUs128 * rate_scale, scratch);
  e.us = span + partial_bytes / kPartialBytesPerUs + (combine_launch ? kCombineLaunchUs : 0.0);
  return e;
}

}  // namespace

Result<AttentionMode> parse_attention_mode(std::string_view name) {
  if (name == "pod") return AttentionMode::pod;
  if (name == "serial") return AttentionMode::serial;
  return invalid_argument(fmt::format("attention mode '{}' is not pod or serial", name));
}

const char* attention_mode_name(AttentionMode mode) {
  return mode == AttentionMode::pod ? "pod" : "serial";
}

Result<PodRatio> parse_pod_ratio(std::string_view name) {
  if (name == "proportional") return PodRatio::proportional;
  if (name == "even" || name == "50:50") return PodRatio::even;
  return invalid_argument(fmt::format("POD ratio '{}' is not proportional or even", name));
}

const char* pod_ratio_name(PodRatio ratio) {
  return ratio == PodRatio::even ? "even" : "proportional";
}

Result<PodPlan> PodPlan::create(const HybridBatch& batch, const AttentionDims& dims,
                                const PodOptions& options) {
  PodPlan plan;
  VPOD_RETURN_IF_ERROR(plan.build(batch, dims, options));
  return plan;
}

void PodPlan::reset() {
  std::string reason = std::move(config_.reason);
  reason.clear();
  config_ = PodConfig{};
  config_.reason = std::move(reason);  // keeps its capacity for the next explanation
}

Status PodPlan::build(const HybridBatch& batch, const AttentionDims& dims,
                      const PodOptions& options) {
  reset();
  const Status status = plan_step(batch, dims, options);
  if (!status.ok()) {
    reset();
    plan_.clear();
  }
  return status;
}

Status PodPlan::plan_step(const HybridBatch& batch, const AttentionDims& dims,
                          const PodOptions& options) {
  VPOD_RETURN_IF_ERROR(validate_dims(dims));
  const PodDevice& dev = options.device;
  if (dev.num_sms < 1) return invalid_argument("PodOptions::device.num_sms must be >= 1");
  if (options.prefill_splits < 0 || options.decode_splits < 0 || options.max_prefill_ctas < 0) {
    return invalid_argument("PodOptions split counts and max_prefill_ctas must be >= 0");
  }
  PodConfig& config = config_;
  config.mode = options.mode;
  config.ratio = options.ratio;
  if (options.mode == AttentionMode::serial) {
    VPOD_RETURN_IF_ERROR(plan_.build(batch, dims,
                                     {.num_sms = dev.num_sms,
                                      .prefill_splits = options.prefill_splits,
                                      .decode_splits = options.decode_splits,
                                      .kernels = options.kernels,
                                      .decode_cluster_slots = dev.decode_cluster_slots,
                                      .ws_prefill_ctas_per_sm = dev.ws_prefill_ctas_per_sm}));
    if (options.explain) {
      config.reason = "serial: prefill and decode kernels with the attention planner's splits";
    }
    return Status();
  }

  const int ctas_per_sm = dev.ctas_per_sm;
  if (ctas_per_sm < 1) {
    return invalid_argument(
        "PodOptions::device.ctas_per_sm must be >= 1 (query_pod_device fills it)");
  }
  Scratch& scratch = scratch_;
  const int slots = dev.num_sms * ctas_per_sm;
  const Shape shape = describe_batch(batch, scratch);
  const std::vector<int>& decode_blocks = scratch.decode_blocks;
  const bool has_prefill = !scratch.tile_blocks.empty();
  const bool has_decode = !decode_blocks.empty();
  const int head_chunks = ceil_div(dims.group_size(), kDecodeRows);
  const int tiles_per_decode = dims.num_kv_heads * head_chunks;

  // Prefill: split only while the prefill CTAs stay within ~2 x SMs. Beyond
  // that limit (up to 8 splits of >= 4 blocks) only when the estimate gains
  // at least kBeyondLimitGain: a short chunk on a long context whose few,
  // long prefill CTAs would outlast everything else (docs/pod.md).
  const int base_prefill = static_cast<int>(scratch.tile_blocks.size()) * dims.num_q_heads;
  const int max_prefill_ctas =
      options.max_prefill_ctas > 0 ? options.max_prefill_ctas : 2 * dev.num_sms;
  int max_prefill_splits = 1;    // within the limit
  int model_prefill_splits = 1;  // what the estimate may consider
  if (options.prefill_splits > 0) {
    max_prefill_splits = model_prefill_splits = options.prefill_splits;
  } else if (base_prefill > 0) {
    const int by_blocks =
        std::clamp(shape.max_tile_blocks / kMinPrefillBlocksPerSplit, 1, kMaxPodPrefillSplits);
    max_prefill_splits = std::clamp(max_prefill_ctas / base_prefill, 1, by_blocks);
    model_prefill_splits = options.allow_beyond_prefill_limit ? by_blocks : max_prefill_splits;
  }
  // Decode: split candidates from none up to kFluidMaxDecodeWaves waves of
  // decode CTAs; the estimate decides.
  const long long decode_stop_ctas = kFluidMaxDecodeWaves * slots;
  std::vector<int>& decode_candidates = scratch.decode_candidates;
  decode_candidates.clear();
  if (options.decode_splits > 0) {
    decode_candidates.push_back(options.decode_splits);
  } else {
    decode_candidates.push_back(1);
    int last_chunk = shape.max_decode_blocks;
    for (int n = 1; n <= kMaxPodDecodeSplits && has_decode; ++n) {
      const int chunk = std::max(1, ceil_div(shape.max_decode_blocks, n));
      long long tiles = 0;
      for (int b : decode_blocks) tiles += ceil_div(b, chunk);
      tiles *= tiles_per_decode;  // one CTA each
      if (n > 1) {
        if (chunk < kMinDecodeBlocksPerSplit) break;
        if (chunk != last_chunk) decode_candidates.push_back(n);
      }
      last_chunk = chunk;
      if (tiles >= decode_stop_ctas) break;  // enough decode CTAs: no further split
    }
  }
  // The smallest estimate within the prefill limit, and beyond it (taken for
  // a gain of at least kBeyondLimitGain).
  struct Choice {
    int prefill = 1, decode = 1;
    Estimate e;
    bool set = false;
  };
  struct Decision {
    Choice within, beyond;
    bool go_beyond = false;
    PodRatio ratio = PodRatio::proportional;
    const Choice& chosen() const { return go_beyond ? beyond : within; }
  };
  const int first_prefill = options.prefill_splits > 0 ? options.prefill_splits : 1;
  // Coordinate descent over (prefill splits, decode splits) for each ratio
  // policy: prefill splits for the one-wave decode split, then decode splits,
  // then prefill splits again; the other ratio starts from the first one's
  // choice.
  Model model;
  model.wgmma_prefill = dev.wgmma_prefill;
  model.ws_prefill = ws_prefill_runs(options.kernels, dev.ws_prefill_ctas_per_sm);
  model.ws_pack = model.ws_prefill && options.kernels.ws_gqa_pack && dims.group_size() > 1;
  model.even = options.ratio == PodRatio::even;
  model.num_sms = dev.num_sms;
  model.ctas_per_sm = ctas_per_sm;
  for (int g : {8, 4, 2}) {
    if (dev.num_sms % g == 0 && dims.num_q_heads % g == 0 && tiles_per_decode % g == 0 &&
        (!model.ws_pack || dims.num_kv_heads % g == 0)) {
      model.group = g;
      break;
    }
  }
  auto estimate_for = [&](int prefill_splits, int decode_splits, Kinds kinds = Kinds::both) {
    return estimate(shape, dims, model, prefill_splits, decode_splits, scratch, kinds);
  };
  const int last_prefill = model_prefill_splits;
  // Both searches go up in splits and stop after two candidates in a row
  // that do not beat the best so far (the estimate is about unimodal in the
  // split count; planning time).
  auto best_prefill_for = [&](Decision& d, int n) {
    Choice within, beyond;
    double best_us = 0;
    int worse = 0;
    for (int s = first_prefill; s <= last_prefill; ++s) {
      Choice& c = s <= max_prefill_splits ? within : beyond;
      const Estimate e = estimate_for(s, n);
      if (!c.set || e.us < c.e.us * (1 - kSplitGain)) c = {s, n, e, true};
      if (s == first_prefill || e.us < best_us * (1 - kSplitGain)) {
        best_us = e.us;
        worse = 0;
      } else if (++worse >= 2) {
        break;
      }
    }
    d.within = within;
    d.beyond = beyond;
    d.go_beyond = beyond.set && beyond.e.us < (1 - kBeyondLimitGain) * within.e.us;
  };
  auto best_decode_for = [&](Decision& d) {
    // Up from the fewest splits; more splits only for kSplitGain.
    const Choice start = d.chosen();
    Choice c;
    int worse = 0;
    for (int n : decode_candidates) {
      const Estimate e = n == start.decode ? start.e : estimate_for(start.prefill, n);
      if (!c.set || e.us < c.e.us * (1 - kSplitGain)) {
        c = {start.prefill, n, e, true};
        worse = 0;
      } else if (++worse >= 2) {
        break;
      }
    }
    return c.decode;
  };
  // The decode split that fills one wave starts the search.
  const int wave_decode = [&] {
    int n0 = decode_candidates.front();
    for (int n : decode_candidates) {
      n0 = n;
      long long tiles = 0;
      const int chunk = std::max(1, ceil_div(shape.max_decode_blocks, n));
      for (int b : decode_blocks) tiles += ceil_div(b, chunk);
      if (tiles * tiles_per_decode >= static_cast<long long>(slots)) break;
    }
    return n0;
  }();
  Decision decision;
  const bool preferred_even = options.ratio == PodRatio::even;
  decision.ratio = preferred_even ? PodRatio::even : PodRatio::proportional;
  best_prefill_for(decision, wave_decode);
  const int n = best_decode_for(decision);
  if (n != decision.chosen().decode) best_prefill_for(decision, n);
  double other_ratio_us = 0;  // the policy not taken (0: not estimated)
  if (options.choose_ratio && has_prefill && has_decode) {
    // The other policy at the same prefill split, with its best decode split
    // (planning time: no second prefill search).
    model.even = !preferred_even;
    Decision other = decision;
    other.ratio = preferred_even ? PodRatio::proportional : PodRatio::even;
    Choice& c = other.go_beyond ? other.beyond : other.within;
    c.e = estimate_for(c.prefill, c.decode);
    c.decode = best_decode_for(other);
    c.e = estimate_for(c.prefill, c.decode);
    if (other.go_beyond) {  // the within-limit estimate under this policy too
      other.within.e = estimate_for(other.within.prefill, other.within.decode);
      other.go_beyond = other.beyond.e.us < (1 - kBeyondLimitGain) * other.within.e.us;
    }
    other_ratio_us = other.chosen().e.us;
    if (other.chosen().e.us < (1 - kRatioSwitchGain) * decision.chosen().e.us) {
      other_ratio_us = decision.chosen().e.us;
      decision = other;
    }
  }
  double serial_us = 0;  // the serial kernels' estimate (also explained without the fallback)
  if (options.serial_fallback || options.explain) {
    // The serial kernels on the same model: the prefill grid alone, then the
    // decode grid alone, each with its best split among a few: none and the
    // fused plan's (decode also the one-wave split).
    model.even = false;
    double prefill_us = 0, decode_us = 0;
    const Choice& fused_choice = decision.chosen();
    if (has_prefill) {
      prefill_us = estimate_for(1, 1, Kinds::prefill_only).us;
      if (fused_choice.prefill > 1) {
        prefill_us =
            std::min(prefill_us, estimate_for(fused_choice.prefill, 1, Kinds::prefill_only).us);
      }
    }
    if (has_decode) {
      decode_us = 1e300;
      std::array<int, 3> splits = {1, wave_decode, fused_choice.decode};
      std::sort(splits.begin(), splits.end());
      const auto end = std::unique(splits.begin(), splits.end());
      for (auto it = splits.begin(); it != end; ++it) {
        decode_us = std::min(decode_us, estimate_for(1, *it, Kinds::decode_only).us);
      }
    }
    serial_us = prefill_us + decode_us;
    config.serial_prefill_estimate_us = prefill_us;
  }
  const Choice& within = decision.within;
  const Choice& beyond = decision.beyond;
  const bool go_beyond = decision.go_beyond;
  const Choice& chosen = decision.chosen();
  const int best_prefill = chosen.prefill, best_decode = chosen.decode;
  const Estimate& best = chosen.e;
  config.ratio = decision.ratio;
  config.serial_estimate_us = serial_us;
  config.estimate_us = best.us;
  config.estimate_within_limit_us = within.e.us;
  config.prefill_beyond_limit = go_beyond;
  if (options.serial_fallback && serial_us > 0 && best.us >= serial_us) {
    // The serial fallback: attention.h's own plan, run by prefill() and decode().
    VPOD_RETURN_IF_ERROR(plan_.build(batch, dims,
                                     {.num_sms = dev.num_sms,
                                      .kernels = options.kernels,
                                      .decode_cluster_slots = dev.decode_cluster_slots,
                                      .ws_prefill_ctas_per_sm = dev.ws_prefill_ctas_per_sm}));
    config.fused = false;
    config.wgmma_prefill = dev.wgmma_prefill;  // the standalone prefill's tile too
    if (options.explain) {
      fmt::format_to(std::back_inserter(config.reason),
                     "serial fallback: fused estimate {:.0f} us ({}/{} splits, ratio {}) does not "
                     "beat the serial kernels' {:.0f} us",
                     best.us, best_prefill, best_decode, pod_ratio_name(decision.ratio), serial_us);
    }
    return Status();
  }

  VPOD_RETURN_IF_ERROR(plan_.build(batch, dims,
                                   {.num_sms = dev.num_sms,
                                    .prefill_splits = best_prefill,
                                    .decode_splits = best_decode,
                                    .decode_kernel = DecodeKernel::tile,
                                    .kernels = options.kernels}));
  config.wgmma_prefill = dev.wgmma_prefill;
  config.ctas_per_sm = ctas_per_sm;
  config.prefill_splits = best_prefill;
  config.decode_splits = best_decode;
  config.prefill_ctas = static_cast<int>(plan_.prefill_items().size()) * dims.num_q_heads;
  config.decode_tiles = static_cast<int>(plan_.decode_items().size()) * tiles_per_decode;
  config.decode_ctas = config.decode_tiles;
  config.grid = config.prefill_ctas + config.decode_ctas;
  if (options.explain) {
    auto out = std::back_inserter(config.reason);
    fmt::format_to(out,
                   "{} slots ({} SMs x {} CTAs); {} prefill {} tiles x {} heads, splits {} (limit "
                   "{} for <= {} CTAs",
                   slots, dev.num_sms, ctas_per_sm, dev.wgmma_prefill ? "wgmma" : "mma.sync",
                   scratch.tile_blocks.size(), dims.num_q_heads, best_prefill, max_prefill_splits,
                   max_prefill_ctas);
    if (go_beyond) {
      fmt::format_to(out, "; beyond it: estimate {:.0f} vs {:.0f} us", beyond.e.us, within.e.us);
    }
    fmt::format_to(out,
                   ") -> {} CTAs; decode {} tiles, splits {} (candidates {}) -> {} CTAs; "
                   "ratio {}; estimate {:.0f} us (fluid",
                   config.prefill_ctas, decode_blocks.size() * tiles_per_decode, best_decode,
                   decode_candidates.size(), config.decode_ctas, pod_ratio_name(config.ratio),
                   best.us);
    if (other_ratio_us > 0) {
      const PodRatio other =
          config.ratio == PodRatio::even ? PodRatio::proportional : PodRatio::even;
      fmt::format_to(out, "; ratio {} {:.0f} us", pod_ratio_name(other), other_ratio_us);
    }
    if (serial_us > 0) fmt::format_to(out, "; serial estimate {:.0f} us", serial_us);
    fmt::format_to(out, ")");
  }
  return Status();
}

}  // namespace vpod::attention
