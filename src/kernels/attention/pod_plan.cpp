// The POD planner: once per step, on the CPU, it chooses the KV splits of the
// prefill tiles and decodes and the decode tiles per CTA for the fused kernel,
// then builds the work lists through AttentionPlan with those splits forced.
// See docs/pod.md for the model and its calibration.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <queue>
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
// The hybrid model takes the ticket simulation's choice over the list
// schedule's only when the simulation predicts this gain. Measured on the
// H200 (2026-11-30 12:16 UTC, 200-case sweep, both models' plans timed): the
// simulation alone chose more prefill splits than the list schedule in 96
// cases and ran those 3.3% slower on average (split costs are underrated),
// but it rescued the cases where a few long prefill CTAs start late (0.89x ->
// 1.06x); its large predicted gains are the real ones. Composed from those
// measured plans, a 15% threshold gives mean 1.231x and min 1.03x (list
// schedule alone 1.226x / 0.89x, simulation alone 1.215x / 0.97x); picked on
// random halves of the sweep it beat the list schedule on the other half in
// 189 of 200 splits.
constexpr double kTicketOverrideGain = 0.15;
// Decode: at most this many KV splits, each of >= 4 key blocks (256 keys).
constexpr int kMaxPodDecodeSplits = 16;
constexpr int kMinDecodeBlocksPerSplit = 4;
// Decode tiles per CTA when the caller leaves the choice to the planner.
// With equal occupancy the makespan model cannot tell 1 from 2 (the same
// bytes stream through the same number of CTA slots), so this is measured:
// on the H200 (2026-11-30, 200-case sweep) one 4-warp DecodeTile per CTA ran
// the fused kernel 2.5% faster on average than two 2-warp virtual tiles
// (1 to 6% across decode counts), so 1 it is; 2 stays available and tested.
constexpr int kDefaultVirtualDecode = 1;
// Cost model, in microseconds of one CTA slot, calibrated on the H200 with the
// separate kernels (docs/attention.md): a 128x64 prefill block of a 128-dim
// tile with two CTAs per SM takes ~4.3 us on the mma.sync tile (0.544 ms for
// 33.8K blocks on 264 slots, ~260 TFLOP/s) and ~2.6 us on the wgmma tile
// (~425 TFLOP/s, the same 264 slots); a 64-key decode block (32 KB of K and
// V) ~1.9 us (0.49 ms for 64K blocks on 264 slots). Both scale with head_dim.
// A CTA's start and end cost about one block; a split adds a combine launch
// and the fp32 partial rows' write and read.
constexpr double kPrefillBlockUs128 = 4.3;
constexpr double kWgmmaPrefillBlockUs128 = 2.6;
constexpr double kDecodeBlockUs128 = 1.9;
constexpr double kCombineLaunchUs = 4.0;
constexpr double kPartialBytesPerUs = 3.0e6;  // ~3 TB/s
// Above this many waves of CTAs, wave quantization is a few percent: the
// makespan is estimated from the total instead of simulated (planning time).
constexpr std::size_t kMaxSimulatedWaves = 4;
constexpr std::size_t kMaxSimulatedTicketWaves = 8;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Longest-processing-time list schedule of `costs` (sorted descending) on `slots`.
double makespan(const std::vector<double>& costs, int slots) {
  if (costs.empty()) return 0.0;
  if (costs.size() > kMaxSimulatedWaves * static_cast<std::size_t>(slots)) {
    double total = 0.0;
    for (double c : costs) total += c;
    return std::max(costs.front(), total / slots);
  }
  std::priority_queue<double, std::vector<double>, std::greater<double>> finish;
  for (int i = 0; i < slots; ++i) finish.push(0.0);
  double span = 0.0;
  for (double c : costs) {
    const double start = finish.top();
    finish.pop();
    finish.push(start + c);
    span = std::max(span, start + c);
  }
  return span;
}

// The fused kernel's schedule as the device runs it: `num_sms` SMs of
// `ctas_per_sm` slots. The grid's CTAs start by rounds (every SM's first slot,
// then every second one), then one wherever a slot frees. Each takes its SM's
// next ticket, the kind pod_ticket_kind gives it (the kernel's own rule), and
// the next unit of that kind, or of the other kind once that one is
// exhausted. Units run in plan order, which is longest first within a kind
// (`prefill` and `decode` are sorted so). Returns the last CTA's finish.
// Unlike a longest-first list schedule it sees what the ratio policy does,
// e.g. a few long prefill CTAs whose tickets come up only after several
// decode CTAs have run on their SM.
double simulate_tickets(const std::vector<double>& prefill, const std::vector<double>& decode,
                        int num_sms, int ctas_per_sm, bool even) {
  const std::size_t counts[2] = {prefill.size(), decode.size()};
  const std::size_t grid = counts[0] + counts[1];
  if (grid == 0) return 0.0;
  const std::size_t slots = static_cast<std::size_t>(num_sms) * ctas_per_sm;
  if (grid > kMaxSimulatedTicketWaves * slots) {
    double total = 0.0, longest = 0.0;
    for (const auto* list : {&prefill, &decode}) {
      for (double c : *list) total += c;
      if (!list->empty()) longest = std::max(longest, list->front());
    }
    return std::max(longest, total / static_cast<double>(slots));
  }
  std::vector<unsigned> tickets(num_sms, 0u);
  std::size_t next[2] = {0, 0};
  auto run_next = [&](int sm, double now) {
    int kind = pod_ticket_kind(tickets[sm]++, static_cast<int>(counts[0]),
                               static_cast<int>(counts[1]), even);
    if (next[kind] >= counts[kind]) kind ^= 1;
    const double cost = kind == 0 ? prefill[next[0]++] : decode[next[1]++];
    return now + cost;
  };
  using Slot = std::pair<double, int>;  // free at, SM
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> free_slots;
  std::size_t launched = 0;
  double span = 0.0;
  for (int round = 0; round < ctas_per_sm; ++round) {
    for (int sm = 0; sm < num_sms && launched < grid; ++sm, ++launched) {
      const double end = run_next(sm, 0.0);
      span = std::max(span, end);
      free_slots.push({end, sm});
    }
  }
  for (; launched < grid; ++launched) {
    const auto [now, sm] = free_slots.top();
    free_slots.pop();
    const double end = run_next(sm, now);
    span = std::max(span, end);
    free_slots.push({end, sm});
  }
  return span;
}

// KV pieces (in key blocks) of a range of `blocks` blocks forced to `splits`,
// as AttentionPlan::create cuts it (no empty piece).
// The fluid model (PodPlannerModel::fluid), calibrated on the H200
// (2026-11-30 14:11 UTC: 862 timed POD plans of the named cases, the 200-case
// sweep and the engine's hybrid steps under forced decode splits 1-16; the
// estimates track the measured times within 0.93 +- 4.4%, the serial kernels'
// within 0.94 +- 3.8%). A prefill CTA costs (blocks + 1) x 2.6 us (wgmma;
// 4.3 mma.sync) whatever runs beside it; the decode CTAs share the HBM
// bandwidth, 136 blocks of 64 keys (32 KB at head_dim 128) per us, each at
// most 0.85 blocks per us (a decode CTA alone cannot stream faster), so
// decode CTAs run faster while prefill CTAs hold the other slots: the overlap
// POD exists for, which the additive models cannot see.
constexpr double kFluidBandwidthBlocksPerUs128 = 136.0;
constexpr double kFluidCtaBlocksPerUs128 = 0.85;
// More KV splits (prefill or decode) are taken only for at least this
// estimated gain: measured, a split the estimate favours by < 1% tends to run
// 1-2.5% slower (its merge and per-CTA costs are underrated), e.g. the named
// cases 1024@4096 + 64@4096 and 1024@12288 + 64@12288 with 2-3 decode splits.
constexpr double kSplitGain = 0.015;
// The other ratio policy is taken for at least this estimated gain.
constexpr double kRatioSwitchGain = 0.02;
// Decode split candidates stop once the decode CTAs exceed this many waves.
constexpr long long kFluidMaxDecodeWaves = 4;
// Beyond this many waves of (grouped) CTAs the simulation gives way to the
// closed form (planning time).
constexpr std::size_t kMaxFluidWaves = 16;

// The fused kernel's schedule (per-SM tickets, kind counters, CTAs starting
// by rounds then wherever a slot frees, as simulate_tickets) with decode CTAs
// as fluid work: `prefill_us` are prefill CTA times, `decode_blocks` decode
// CTA work in blocks (both in plan order); the running decode CTAs each
// progress at min(cta_rate, bandwidth / running). Returns the makespan (us).
double simulate_fluid(const std::vector<double>& prefill_us,
                      const std::vector<double>& decode_blocks, int num_sms, int ctas_per_sm,
                      bool even, double bandwidth, double cta_rate) {
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
  std::vector<unsigned> tickets(num_sms, 0u);
  std::size_t next[2] = {0, 0};
  using Entry = std::pair<double, int>;  // prefill: finish time; decode: finish work; SM
  std::vector<Entry> prefill_heap, decode_heap;
  prefill_heap.reserve(slots);
  decode_heap.reserve(slots);
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

std::vector<int> pieces(int blocks, int splits) {
  splits = std::clamp(splits, 1, std::max(blocks, 1));
  const int per = ceil_div(blocks, splits);
  std::vector<int> out;
  for (int start = 0; start < blocks; start += per) out.push_back(std::min(per, blocks - start));
  return out;
}

struct Shape {
  // Prefill tiles (128 query rows each): key blocks and rows.
  std::vector<int> tile_blocks, tile_rows;
  // Decodes: 64-key blocks of each context.
  std::vector<int> decode_blocks;
  int max_tile_blocks = 0;
  int max_decode_blocks = 0;
};

Shape describe_batch(const HybridBatch& batch) {
  Shape shape;
  for (const BatchSequence& s : batch.prefills) {
    for (int q = 0; q < s.num_new; q += kPrefillBlockM) {
      const int rows = std::min(kPrefillBlockM, s.num_new - q);
      const int blocks = ceil_div(s.cached_len + q + rows, kPrefillBlockN);
      shape.tile_blocks.push_back(blocks);
      shape.tile_rows.push_back(rows);
      shape.max_tile_blocks = std::max(shape.max_tile_blocks, blocks);
    }
  }
  for (const BatchSequence& s : batch.decodes) {
    shape.decode_blocks.push_back(ceil_div(s.context_len(), kDecodeBlockN));
    shape.max_decode_blocks = std::max(shape.max_decode_blocks, shape.decode_blocks.back());
  }
  return shape;
}

struct Estimate {
  double us = 0;
  int prefill_ctas = 0, decode_tiles = 0, decode_ctas = 0;
};

// How the planner turns CTA costs into a makespan.
struct Model {
  bool wgmma_prefill = false;
  bool tickets = true;  // simulate_tickets; false: longest-first list schedule
  bool fluid = false;   // simulate_fluid (overrides tickets)
  bool even = false;    // the ratio policy (tickets and fluid)
  int num_sms = 0, ctas_per_sm = 0;
  // fluid: CTAs simulated in groups of this many identical ones (the heads
  // of one KV piece) on num_sms / group SMs: the same schedule at a fraction
  // of the planning time. It divides num_sms, the query heads and the decode
  // tiles per piece (1 with two decode tiles per CTA).
  int group = 1;
};

Estimate estimate(const Shape& shape, const AttentionDims& dims, const Model& model,
                  int prefill_splits, int decode_splits, int virtual_decode) {
  const bool wgmma_prefill = model.wgmma_prefill;
  const double scale = dims.head_dim / 128.0;
  const double prefill_block =
      (wgmma_prefill ? kWgmmaPrefillBlockUs128 : kPrefillBlockUs128) * scale;
  const double decode_block = kDecodeBlockUs128 * scale;
  const int head_chunks = ceil_div(dims.group_size(), kDecodeRows);
  const int tiles_per_piece = dims.num_kv_heads * head_chunks;
  Estimate e;
  // Costs are sorted per KV piece, then expanded to the piece's CTAs (all of
  // a piece's heads cost the same): sorting every CTA was most of the
  // planning time.
  std::vector<double> prefill_pieces, prefill_costs, costs;  // costs: decode CTAs
  double partial_bytes = 0;
  bool combine_launch = false;  // prefill splits, or decode splits on virtual tiles
  const double row_bytes = dims.num_q_heads * (dims.head_dim + 1) * 4.0;
  for (std::size_t t = 0; t < shape.tile_blocks.size(); ++t) {
    const std::vector<int> p = pieces(shape.tile_blocks[t], prefill_splits);
    if (p.size() > 1) {
      partial_bytes += 2.0 * p.size() * shape.tile_rows[t] * row_bytes;
      combine_launch = true;
    }
    for (int b : p) prefill_pieces.push_back((b + 1) * prefill_block);
  }
  // Plan order: longest first within each kind (AttentionPlan sorts its items so).
  std::sort(prefill_pieces.begin(), prefill_pieces.end(), std::greater<double>());
  const int group = model.fluid ? model.group : 1;
  const int prefill_copies = dims.num_q_heads / group;
  prefill_costs.reserve(prefill_pieces.size() * prefill_copies);
  for (double c : prefill_pieces) prefill_costs.insert(prefill_costs.end(), prefill_copies, c);
  e.prefill_ctas = static_cast<int>(prefill_pieces.size()) * dims.num_q_heads;
  const int chunk = std::max(1, ceil_div(shape.max_decode_blocks, std::max(decode_splits, 1)));
  // Decode tiles in plan order (longest piece first, the heads of a piece
  // adjacent); a CTA takes virtual_decode consecutive tiles.
  std::vector<int> decode_pieces, tile_blocks;
  for (int blocks : shape.decode_blocks) {
    const std::vector<int> p = pieces(blocks, ceil_div(blocks, chunk));
    if (p.size() > 1) {
      // With one decode tile per CTA the last split merges in the kernel.
      partial_bytes += 2.0 * p.size() * row_bytes;
      combine_launch = combine_launch || virtual_decode != 1;
    }
    decode_pieces.insert(decode_pieces.end(), p.begin(), p.end());
  }
  std::sort(decode_pieces.begin(), decode_pieces.end(), std::greater<int>());
  e.decode_tiles = static_cast<int>(decode_pieces.size()) * tiles_per_piece;
  e.decode_ctas = ceil_div(e.decode_tiles, virtual_decode);
  double span = 0.0;
  if (model.fluid) {
    // Decode CTAs as work in blocks; one group of `group` CTAs per entry.
    std::vector<double> decode_work;
    if (virtual_decode == 1) {
      const int copies = tiles_per_piece / group;
      decode_work.reserve(decode_pieces.size() * copies);
      for (int b : decode_pieces) decode_work.insert(decode_work.end(), copies, b + 1.0);
    } else {
      tile_blocks.reserve(decode_pieces.size() * tiles_per_piece);
      for (int b : decode_pieces) tile_blocks.insert(tile_blocks.end(), tiles_per_piece, b);
      for (std::size_t i = 0; i < tile_blocks.size(); i += virtual_decode) {
        double blocks = 1;
        for (std::size_t j = i; j < std::min(tile_blocks.size(), i + virtual_decode); ++j) {
          blocks += tile_blocks[j];
        }
        decode_work.push_back(blocks);
      }
    }
    const double rate_scale = 128.0 / dims.head_dim;  // blocks are head_dim / 128 the bytes
    span = simulate_fluid(prefill_costs, decode_work, model.num_sms / group, model.ctas_per_sm,
                          model.even, kFluidBandwidthBlocksPerUs128 * rate_scale / group,
                          kFluidCtaBlocksPerUs128 * rate_scale);
    e.us = span + partial_bytes / kPartialBytesPerUs + (combine_launch ? kCombineLaunchUs : 0.0);
    return e;
  }
  tile_blocks.reserve(decode_pieces.size() * tiles_per_piece);
  for (int b : decode_pieces) tile_blocks.insert(tile_blocks.end(), tiles_per_piece, b);
  for (std::size_t i = 0; i < tile_blocks.size(); i += virtual_decode) {
    double blocks = 0;
    for (std::size_t j = i; j < std::min(tile_blocks.size(), i + virtual_decode); ++j) {
      blocks += tile_blocks[j];
    }
    costs.push_back((blocks + 1) * decode_block);
  }
  if (model.tickets) {
    span = simulate_tickets(prefill_costs, costs, model.num_sms, model.ctas_per_sm, model.even);
  } else {
    std::vector<double> all(prefill_costs.size() + costs.size());
    std::merge(prefill_costs.begin(), prefill_costs.end(), costs.begin(), costs.end(), all.begin(),
               std::greater<double>());
    span = makespan(all, model.num_sms * model.ctas_per_sm);
  }
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

Result<PodPlannerModel> parse_pod_planner_model(std::string_view name) {
  if (name == "fluid") return PodPlannerModel::fluid;
  if (name == "hybrid") return PodPlannerModel::hybrid;
  if (name == "tickets") return PodPlannerModel::tickets;
  if (name == "lpt") return PodPlannerModel::lpt;
  return invalid_argument(
      fmt::format("POD planner model '{}' is not fluid, hybrid, tickets or lpt", name));
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
  VPOD_RETURN_IF_ERROR(validate_dims(dims));
  const PodDevice& dev = options.device;
  if (dev.num_sms < 1) return invalid_argument("PodOptions::device.num_sms must be >= 1");
  if (options.virtual_decode < 0 || options.virtual_decode > kPodMaxVirtualDecode) {
    return invalid_argument(fmt::format("PodOptions::virtual_decode must be 0, 1 or 2 (got {})",
                                        options.virtual_decode));
  }
  if (options.prefill_splits < 0 || options.decode_splits < 0 || options.max_prefill_ctas < 0) {
    return invalid_argument("PodOptions split counts and max_prefill_ctas must be >= 0");
  }
  PodConfig config;
  config.mode = options.mode;
  config.ratio = options.ratio;
  if (options.mode == AttentionMode::serial) {
    VPOD_ASSIGN_OR_RETURN(AttentionPlan plan,
                          AttentionPlan::create(batch, dims,
                                                {.num_sms = dev.num_sms,
                                                 .prefill_splits = options.prefill_splits,
                                                 .decode_splits = options.decode_splits,
                                                 .decode_deep = options.decode_deep}));
    config.reason = "serial: prefill and decode kernels with the attention planner's splits";
    return PodPlan(std::move(plan), std::move(config));
  }

  const int virtual_decode =
      options.virtual_decode > 0 ? options.virtual_decode : kDefaultVirtualDecode;
  const int ctas_per_sm = dev.ctas_per_sm[virtual_decode];
  if (ctas_per_sm < 1) {
    return invalid_argument(
        fmt::format("PodOptions::device.ctas_per_sm[{}] must be >= 1 (query_pod_device fills it)",
                    virtual_decode));
  }
  const int slots = dev.num_sms * ctas_per_sm;
  const Shape shape = describe_batch(batch);
  const int head_chunks = ceil_div(dims.group_size(), kDecodeRows);
  const int tiles_per_decode = dims.num_kv_heads * head_chunks;

  // Prefill: split only while the prefill CTAs stay within ~2 x SMs. Beyond
  // that limit (up to 8 splits of >= 4 blocks) only when the estimate gains
  // at least kBeyondLimitGain: a short chunk on a long context whose few,
  // long prefill CTAs would outlast everything else (measured on the H200:
  // 633 rows on a 17.7K context, 160 CTAs of ~280 blocks, ran 1.34x slower
  // fused than the serial kernels with their finer split).
  const int base_prefill = static_cast<int>(shape.tile_blocks.size()) * dims.num_q_heads;
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
  // Decode: split only as far as needed for the decode CTAs to fill one wave
  // (fluid: up to kFluidMaxDecodeWaves waves; the estimate decides).
  const bool fluid = options.planner_model == PodPlannerModel::fluid;
  const long long decode_stop_ctas = fluid ? kFluidMaxDecodeWaves * slots : slots;
  std::vector<int> decode_candidates;
  if (options.decode_splits > 0) {
    decode_candidates.push_back(options.decode_splits);
  } else {
    decode_candidates.push_back(1);
    int last_chunk = shape.max_decode_blocks;
    for (int n = 1; n <= kMaxPodDecodeSplits && !shape.decode_blocks.empty(); ++n) {
      const int chunk = std::max(1, ceil_div(shape.max_decode_blocks, n));
      long long tiles = 0;
      for (int b : shape.decode_blocks) tiles += ceil_div(b, chunk);
      tiles *= tiles_per_decode;
      const long long ctas = (tiles + virtual_decode - 1) / virtual_decode;
      if (n > 1) {
        if (chunk < kMinDecodeBlocksPerSplit) break;
        if (chunk != last_chunk) decode_candidates.push_back(n);
      }
      last_chunk = chunk;
      if (ctas >= decode_stop_ctas) break;  // enough decode CTAs: no further split
    }
  }
  Model list_model;
  list_model.wgmma_prefill = dev.wgmma_prefill;
  list_model.tickets = false;
  list_model.even = options.ratio == PodRatio::even;
  list_model.num_sms = dev.num_sms;
  list_model.ctas_per_sm = ctas_per_sm;
  // Under one model: the smallest estimate within the prefill limit, and
  // beyond it (taken for a gain of at least kBeyondLimitGain).
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
  auto decide = [&](const Model& model) {
    Decision d;
    d.ratio = model.even ? PodRatio::even : PodRatio::proportional;
    for (int s = first_prefill; s <= model_prefill_splits; ++s) {
      Choice& c = s <= max_prefill_splits ? d.within : d.beyond;
      for (int n : decode_candidates) {
        const Estimate e = estimate(shape, dims, model, s, n, virtual_decode);
        if (!c.set || e.us < c.e.us * (1 - 1e-9)) {  // ties keep fewer splits
          c = {s, n, e, true};
        }
      }
    }
    d.go_beyond = d.beyond.set && d.beyond.e.us < (1 - kBeyondLimitGain) * d.within.e.us;
    return d;
  };
  Decision decision;
  std::string model_note;
  double serial_us = 0;  // fluid: the serial kernels' estimate
  if (fluid) {
    // Coordinate descent over (prefill splits, decode splits) for each ratio
    // policy, on the fluid model: prefill splits for the one-wave decode
    // split, then decode splits, then prefill splits again; the other ratio
    // starts from the first one's choice.
    Model model = list_model;
    model.fluid = true;
    for (int g : {8, 4, 2}) {
      if (virtual_decode == 1 && dev.num_sms % g == 0 && dims.num_q_heads % g == 0 &&
          tiles_per_decode % g == 0) {
        model.group = g;
        break;
      }
    }
    const int last_prefill = model_prefill_splits;
    // Both searches go up in splits and stop after two candidates in a row
    // that do not beat the best so far (the estimate is about unimodal in
    // the split count; planning time).
    auto best_prefill_for = [&](Decision& d, int n) {
      Choice within, beyond;
      double best_us = 0;
      int worse = 0;
      for (int s = first_prefill; s <= last_prefill; ++s) {
        Choice& c = s <= max_prefill_splits ? within : beyond;
        const Estimate e = estimate(shape, dims, model, s, n, virtual_decode);
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
        const Estimate e = n == start.decode
                               ? start.e
                               : estimate(shape, dims, model, start.prefill, n, virtual_decode);
        if (!c.set || e.us < c.e.us * (1 - kSplitGain)) {
          c = {start.prefill, n, e, true};
          worse = 0;
        } else if (++worse >= 2) {
          break;
        }
      }
      return c.decode;
    };
    // The old rule's decode split (one wave) starts the search.
    const int wave_decode = [&] {
      int n0 = decode_candidates.front();
      for (int n : decode_candidates) {
        n0 = n;
        long long tiles = 0;
        const int chunk = std::max(1, ceil_div(shape.max_decode_blocks, n));
        for (int b : shape.decode_blocks) tiles += ceil_div(b, chunk);
        if (tiles * tiles_per_decode >= static_cast<long long>(slots) * virtual_decode) break;
      }
      return n0;
    }();
    const bool preferred_even = options.ratio == PodRatio::even;
    model.even = preferred_even;
    decision.ratio = preferred_even ? PodRatio::even : PodRatio::proportional;
    best_prefill_for(decision, wave_decode);
    const int n = best_decode_for(decision);
    if (n != decision.chosen().decode) best_prefill_for(decision, n);
    std::string ratio_note;
    if (options.choose_ratio && !shape.tile_blocks.empty() && !shape.decode_blocks.empty()) {
      // The other policy at the same prefill split, with its best decode split
      // (planning time: no second prefill search).
      model.even = !preferred_even;
      Decision other = decision;
      other.ratio = preferred_even ? PodRatio::proportional : PodRatio::even;
      Choice& c = other.go_beyond ? other.beyond : other.within;
      c.e = estimate(shape, dims, model, c.prefill, c.decode, virtual_decode);
      c.decode = best_decode_for(other);
      c.e = estimate(shape, dims, model, c.prefill, c.decode, virtual_decode);
      if (other.go_beyond) {  // the within-limit estimate under this policy too
        other.within.e =
            estimate(shape, dims, model, other.within.prefill, other.within.decode, virtual_decode);
        other.go_beyond = other.beyond.e.us < (1 - kBeyondLimitGain) * other.within.e.us;
      }
      ratio_note =
          fmt::format("; ratio {} {:.0f} us", pod_ratio_name(other.ratio), other.chosen().e.us);
      if (other.chosen().e.us < (1 - kRatioSwitchGain) * decision.chosen().e.us) {
        ratio_note = fmt::format("; ratio {} {:.0f} us", pod_ratio_name(decision.ratio),
                                 decision.chosen().e.us);
        decision = other;
      }
    }
    model_note = "fluid" + ratio_note;
    if (options.serial_fallback) {
      // The serial kernels on the same model: the prefill grid alone, then
      // the decode grid alone (each with its best split among a few).
      Model alone = model;
      alone.even = false;
      Shape prefill_only = shape, decode_only = shape;
      prefill_only.decode_blocks.clear();
      prefill_only.max_decode_blocks = 0;
      decode_only.tile_blocks.clear();
      decode_only.tile_rows.clear();
      decode_only.max_tile_blocks = 0;
      // Splits: none and the fused plan's (decode also the one-wave split).
      double prefill_us = 0, decode_us = 0;
      const Choice& fused_choice = decision.chosen();
      if (!shape.tile_blocks.empty()) {
        prefill_us = estimate(prefill_only, dims, alone, 1, 1, virtual_decode).us;
        if (fused_choice.prefill > 1) {
          prefill_us = std::min(
              prefill_us,
              estimate(prefill_only, dims, alone, fused_choice.prefill, 1, virtual_decode).us);
        }
      }
      if (!shape.decode_blocks.empty()) {
        decode_us = 1e300;
        std::vector<int> splits = {1, wave_decode, fused_choice.decode};
        std::sort(splits.begin(), splits.end());
        splits.erase(std::unique(splits.begin(), splits.end()), splits.end());
        for (int n : splits) {
          decode_us =
              std::min(decode_us, estimate(decode_only, dims, alone, 1, n, virtual_decode).us);
        }
      }
      serial_us = prefill_us + decode_us;
    }
  } else if (options.planner_model == PodPlannerModel::lpt) {
    decision = decide(list_model);
    model_note = "list schedule";
  } else if (options.planner_model == PodPlannerModel::tickets) {
    Model ticket_model = list_model;
    ticket_model.tickets = true;
    decision = decide(ticket_model);
    model_note = "ticket simulation";
  } else if (shape.tile_blocks.empty() || shape.decode_blocks.empty()) {
    // One kind only: the ratio policy plays no part and the simulation is a
    // list schedule in plan order; skip it (decode-only steps plan often).
    decision = decide(list_model);
    model_note = "hybrid: list schedule (one kind)";
  } else {
    // Hybrid: the list schedule's choice unless the ticket simulation
    // predicts its own choice at least kTicketOverrideGain faster than the
    // list schedule's choice (both simulated).
    Model ticket_model = list_model;
    ticket_model.tickets = true;
    const Decision by_list = decide(list_model);
    const Decision by_tickets = decide(ticket_model);
    const Choice& lc = by_list.chosen();
    const double list_simulated =
        estimate(shape, dims, ticket_model, lc.prefill, lc.decode, virtual_decode).us;
    const bool take_tickets = by_tickets.chosen().e.us < (1 - kTicketOverrideGain) * list_simulated;
    decision = take_tickets ? by_tickets : by_list;
    model_note = fmt::format(
        "hybrid: {} (ticket simulation {:.0f} us vs {:.0f} us for the list "
        "schedule's {}/{})",
        take_tickets ? "ticket simulation" : "list schedule", by_tickets.chosen().e.us,
        list_simulated, lc.prefill, lc.decode);
  }
  if (!fluid) decision.ratio = options.ratio;
  const Choice& within = decision.within;
  const Choice& beyond = decision.beyond;
  const bool go_beyond = decision.go_beyond;
  const Choice& chosen = decision.chosen();
  const int best_prefill = chosen.prefill, best_decode = chosen.decode;
  const Estimate& best = chosen.e;
  config.ratio = decision.ratio;
  config.serial_estimate_us = serial_us;
  if (serial_us > 0 && best.us >= serial_us) {
    // The serial fallback: attention.h's own plan, run by prefill() and decode().
    VPOD_ASSIGN_OR_RETURN(
        AttentionPlan plan,
        AttentionPlan::create(batch, dims,
                              {.num_sms = dev.num_sms, .decode_deep = options.decode_deep}));
    config.fused = false;
    config.wgmma_prefill = dev.wgmma_prefill;  // the standalone prefill's tile too
    config.estimate_us = best.us;
    config.estimate_within_limit_us = within.e.us;
    config.prefill_beyond_limit = go_beyond;
    config.reason = fmt::format(
        "serial fallback: fused estimate {:.0f} us ({}/{} splits, ratio {}) does not beat the "
        "serial kernels' {:.0f} us",
        best.us, best_prefill, best_decode, pod_ratio_name(decision.ratio), serial_us);
    return PodPlan(std::move(plan), std::move(config));
  }

  VPOD_ASSIGN_OR_RETURN(
      AttentionPlan plan,
      AttentionPlan::create(batch, dims,
                            {dev.num_sms, best_prefill, best_decode, DecodeKernel::tile}));
  config.virtual_decode = virtual_decode;
  config.wgmma_prefill = dev.wgmma_prefill;
  config.ctas_per_sm = ctas_per_sm;
  config.prefill_splits = best_prefill;
  config.decode_splits = best_decode;
  config.prefill_ctas = static_cast<int>(plan.prefill_items().size()) * dims.num_q_heads;
  config.decode_tiles = static_cast<int>(plan.decode_items().size()) * tiles_per_decode;
  config.decode_ctas = ceil_div(config.decode_tiles, virtual_decode);
  config.grid = config.prefill_ctas + config.decode_ctas;
  config.estimate_us = best.us;
  config.estimate_within_limit_us = within.e.us;
  config.prefill_beyond_limit = go_beyond;
  config.reason = fmt::format(
      "{} slots ({} SMs x {} CTAs); {} prefill {} tiles x {} heads, splits {} (limit {} for <= {} "
      "CTAs{}) -> {} CTAs; decode {} tiles, splits {} (candidates {}) -> {} CTAs "
      "of {}; ratio {}; estimate {:.0f} us ({}{})",
      slots, dev.num_sms, ctas_per_sm, dev.wgmma_prefill ? "wgmma" : "mma.sync",
      shape.tile_blocks.size(), dims.num_q_heads, best_prefill, max_prefill_splits,
      max_prefill_ctas,
      go_beyond ? fmt::format("; beyond it: estimate {:.0f} vs {:.0f} us", beyond.e.us, within.e.us)
                : std::string(),
      config.prefill_ctas, shape.decode_blocks.size() * tiles_per_decode, best_decode,
      decode_candidates.size(), config.decode_ctas, virtual_decode, pod_ratio_name(config.ratio),
      best.us, model_note,
      serial_us > 0 ? fmt::format("; serial estimate {:.0f} us", serial_us) : std::string());
  return PodPlan(std::move(plan), std::move(config));
}

}  // namespace vpod::attention
