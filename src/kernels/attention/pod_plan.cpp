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
  bool even = false;    // the ratio policy (tickets only)
  int num_sms = 0, ctas_per_sm = 0;
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
  prefill_costs.reserve(prefill_pieces.size() * dims.num_q_heads);
  for (double c : prefill_pieces) prefill_costs.insert(prefill_costs.end(), dims.num_q_heads, c);
  e.prefill_ctas = static_cast<int>(prefill_costs.size());
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
  tile_blocks.reserve(decode_pieces.size() * tiles_per_piece);
  for (int b : decode_pieces) tile_blocks.insert(tile_blocks.end(), tiles_per_piece, b);
  e.decode_tiles = static_cast<int>(tile_blocks.size());
  for (std::size_t i = 0; i < tile_blocks.size(); i += virtual_decode) {
    double blocks = 0;
    for (std::size_t j = i; j < std::min(tile_blocks.size(), i + virtual_decode); ++j) {
      blocks += tile_blocks[j];
    }
    costs.push_back((blocks + 1) * decode_block);
    ++e.decode_ctas;
  }
  double span = 0.0;
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
  if (name == "hybrid") return PodPlannerModel::hybrid;
  if (name == "tickets") return PodPlannerModel::tickets;
  if (name == "lpt") return PodPlannerModel::lpt;
  return invalid_argument(
      fmt::format("POD planner model '{}' is not hybrid, tickets or lpt", name));
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
    VPOD_ASSIGN_OR_RETURN(
        AttentionPlan plan,
        AttentionPlan::create(batch, dims,
                              {dev.num_sms, options.prefill_splits, options.decode_splits}));
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
  // Decode: split only as far as needed for the decode CTAs to fill one wave.
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
      if (ctas >= slots) break;  // one wave of decode CTAs: no further split
    }
  }
  Model list_model;
  list_model.wgmma_prefill = dev.wgmma_prefill;
  list_model.tickets = false;
  list_model.even = options.ratio == PodRatio::even;
  list_model.num_sms = dev.num_sms;
  list_model.ctas_per_sm = ctas_per_sm;
  Model ticket_model = list_model;
  ticket_model.tickets = true;
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
    const Choice& chosen() const { return go_beyond ? beyond : within; }
  };
  auto decide = [&](const Model& model) {
    Decision d;
    const int first_prefill = options.prefill_splits > 0 ? options.prefill_splits : 1;
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
  if (options.planner_model == PodPlannerModel::lpt) {
    decision = decide(list_model);
    model_note = "list schedule";
  } else if (options.planner_model == PodPlannerModel::tickets) {
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
  const Choice& within = decision.within;
  const Choice& beyond = decision.beyond;
  const bool go_beyond = decision.go_beyond;
  const Choice& chosen = decision.chosen();
  const int best_prefill = chosen.prefill, best_decode = chosen.decode;
  const Estimate& best = chosen.e;

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
      "CTAs{}) -> {} CTAs; decode {} tiles, splits {} (candidates {}, stop at one wave) -> {} CTAs "
      "of {}; ratio {}; estimate {:.0f} us ({})",
      slots, dev.num_sms, ctas_per_sm, dev.wgmma_prefill ? "wgmma" : "mma.sync",
      shape.tile_blocks.size(), dims.num_q_heads, best_prefill, max_prefill_splits,
      max_prefill_ctas,
      go_beyond ? fmt::format("; beyond it: estimate {:.0f} vs {:.0f} us", beyond.e.us, within.e.us)
                : std::string(),
      config.prefill_ctas, shape.decode_blocks.size() * tiles_per_decode, best_decode,
      decode_candidates.size(), config.decode_ctas, virtual_decode, pod_ratio_name(options.ratio),
      best.us, model_note);
  return PodPlan(std::move(plan), std::move(config));
}

}  // namespace vpod::attention
