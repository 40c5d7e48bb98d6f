// `vpod bench attention`: the attention kernels on the Llama-3-8B shapes of
// docs (32 query heads, 8 KV heads, head_dim 128, fp16), on the per-layer and
// all-layers vAttention layouts and the paged baseline (FlashInfer's kernels,
// block 16 and 256).
//
// Per case it first validates: the per-layer output against the CPU reference
// on sampled rows (tolerance: 2x a naive same-precision implementation's error
// + atol), the all-layers output bit for bit against the per-layer one on the
// same data, and the paged outputs (FlashInfer's kernels) against the same
// reference. Then it times with CUDA events: warm-up, then the
// median of many runs, rotating among input sets whose total exceeds L2. It
// reports ms, TFLOP/s, TB/s and the fraction of the measured ceilings
// (771 TFLOP/s, 4.24 TB/s), as a table and with --json FILE.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/attention_bench_fill.h"
#include "bench/benches.h"
#include "bench/peers/fi_fa3_single.h"
#include "common/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/event.h"
#include "cuda/stream.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_kernels.h"
#include "kernels/attention/attention_reference.h"
#include "kernels/attention/flashinfer/paged_plan.h"

namespace vpod::bench {
namespace {

using attention::AttentionBuffers;
using attention::AttentionDims;
using attention::AttentionPlan;
using attention::PlanOptions;
using nlohmann::json;

// Measured on the H200 (docs/gpu.md): bf16 GEMM and device-to-device copy.
constexpr double kPeakTflops = 771.0;
constexpr double kPeakTbps = 4.24;
constexpr int kAllLayers = 32;  // Llama-3-8B: the all-layers token stride spans 32 layers
constexpr int kMaxSets = 8;

struct Case {
  std::string name;
  bool decode;
  int batch;
  int cached_len;
  int num_new;
  // A chunk case's extra sequence, first in the batch (lead_new > 0): a long
  // chunk beside the batch's short ones (--chunk-shape BxN@C+N2@C2).
  int lead_cached = 0;
  int lead_new = 0;
};

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = {
      {"prefill 4096", false, 1, 0, 4096},        {"prefill 16384", false, 1, 0, 16384},
      {"chunk 1024 @8192", false, 1, 7168, 1024}, {"chunk 2048 @16384", false, 1, 14336, 2048},
      {"decode 32x4096", true, 32, 4095, 1},      {"decode 64x8192", true, 64, 8191, 1},
      {"decode 16x16384", true, 16, 16383, 1},
  };
  return cases;
}

struct Args {
  std::string json_path;
  std::string case_filter;
  // The FA3 contiguous peer by default where the build holds it.
  std::vector<std::string> layouts =
      peers::fi_fa3_single_built()
          ? std::vector<std::string>{"per_layer", "all_layers", "paged16", "paged256", "fi_fa3"}
          : std::vector<std::string>{"per_layer", "all_layers", "paged16", "paged256"};
  std::string dtype = "fp16";
  int prefill_splits = 0;
  int decode_splits = 0;
  std::string decode_kernel = "auto";
  bool counter_merge = false;              // PlanOptions::decode_cluster_merge = false
  attention::KernelOptions kernels;        // --mma-prefill, --no-tma, ...
  std::vector<std::string> decode_shapes;  // extra decode cases, BATCHxCONTEXT
  std::vector<int> prefill_shapes;         // extra one-shot prefill cases, prompt tokens
  std::vector<std::string> chunk_shapes;   // extra chunk cases, BATCHxNEW@CACHED
  int min_iters = 20;
  int max_iters = 200;
  double target_ms = 300.0;
  // > 0: also time per_layer and fi_fa3 head to head in this many rounds,
  // alternating which goes first (a long run of one kernel heats the GPU
  // differently from the other's: one pass each moves the ratio by several
  // percent on these power-bound cases).
  int ab_rounds = 0;
};

// The head-to-head of --ab-rounds: per round, each kernel's median time.
struct AbResult {
  std::string case_name;
  std::vector<double> vpod_ms, fa3_ms;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void fill_random(cuda::DeviceBuffer& buffer, std::uint64_t seed, DType dtype, cudaStream_t stream) {
  fill_random_device(buffer.data(), buffer.bytes() / 2, seed, dtype == DType::bf16, stream);
}

HybridBatch make_batch(const Case& c, int slot_offset = 0) {
  HybridBatch batch;
  int offset = 0;
  int slot = slot_offset;
  if (c.lead_new > 0) {
    batch.prefills.push_back({slot++, c.lead_cached, c.lead_new, offset});
    offset += c.lead_new;
  }
  for (int i = 0; i < c.batch; ++i) {
    BatchSequence s{slot++, c.cached_len, c.num_new, offset};
    offset += c.num_new;
    if (c.decode) {
      batch.decodes.push_back(s);
    } else {
      batch.prefills.push_back(s);
    }
  }
  batch.token_ids.assign(offset, 0);
  return batch;
}

// 4 * head_dim * q_heads per (query, attended key) pair: Q K^T and P V.
double attention_flops(const Case& c, const AttentionDims& d) {
  double pairs = 0, lead_pairs = 0;
  for (int i = 0; i < c.num_new; ++i) pairs += c.cached_len + i + 1;
  for (int i = 0; i < c.lead_new; ++i) lead_pairs += c.lead_cached + i + 1;
  return 4.0 * d.head_dim * d.num_q_heads * (pairs * c.batch + lead_pairs);
}

// Unique bytes moved: K and V of every context once, Q read and O written.
double attention_bytes(const Case& c, const AttentionDims& d) {
  auto seq_bytes = [&](double cached, double num_new) {
    const double kv = 2.0 * (cached + num_new) * d.num_kv_heads * d.head_dim * dtype_size(d.dtype);
    const double qo = 2.0 * num_new * d.num_q_heads * d.head_dim * dtype_size(d.dtype);
    return kv + qo;
  };
  return seq_bytes(c.cached_len, c.num_new) * c.batch +
         (c.lead_new > 0 ? seq_bytes(c.lead_cached, c.lead_new) : 0.0);
}

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iters = 0;
};

// Times launch(set) rotating over `sets` input sets: warm-up, then one event
// pair per run; the median is reported.
template <typename Launch>
Timing time_runs(const Args& args, int sets, cudaStream_t stream, Launch launch) {
  auto start = cuda::Event::create(cuda::Event::Timing::enabled).value();
  auto stop = cuda::Event::create(cuda::Event::Timing::enabled).value();
  const int warmup = std::max(3, sets);
  start.record(stream);
  for (int i = 0; i < warmup; ++i) launch(i % sets);
  stop.record(stream);
  stop.synchronize();
  const double warm_ms = cuda::Event::elapsed_ms(start, stop) / warmup;
  const int iters = std::clamp(static_cast<int>(args.target_ms / std::max(warm_ms, 1e-3)),
                               args.min_iters, args.max_iters);
  std::vector<cuda::Event> events;
  for (int i = 0; i < 2 * iters; ++i) {
    events.push_back(cuda::Event::create(cuda::Event::Timing::enabled).value());
  }
  for (int i = 0; i < iters; ++i) {
    events[2 * i].record(stream);
    launch(i % sets);
    events[2 * i + 1].record(stream);
  }
  events.back().synchronize();
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) ms[i] = cuda::Event::elapsed_ms(events[2 * i], events[2 * i + 1]);
  std::sort(ms.begin(), ms.end());
  return {ms[iters / 2], ms.front(), iters};
}

// The read-only bandwidth ceiling of this GPU, measured like the kernels
// (median of timed runs over 2 GiB, more than 40x L2): what decode streams
// against. 0 when the buffer cannot be allocated.
double measure_read_ceiling_tbps(const Args& args, int sm_count, cudaStream_t stream) {
  constexpr std::size_t kBytes = std::size_t{2} << 30;
  auto buffer = cuda::DeviceBuffer::allocate(kBytes);
  auto sink = cuda::DeviceBuffer::allocate(16);
  if (!buffer.ok() || !sink.ok()) return 0.0;
  buffer->fill_bytes(0x5a, stream);
  double best = 0.0;
  for (int ctas_per_sm : {2, 4}) {
    const Timing t = time_runs(args, 1, stream, [&](int) {
      read_bandwidth_device(buffer->data(), kBytes, sm_count * ctas_per_sm, sink->as<unsigned>(),
                            stream);
    });
    best = std::max(best, static_cast<double>(kBytes) / (t.median_ms * 1e-3) / 1e12);
  }
  return best;
}

struct Row {
  std::string case_name, layout;
  double ms = 0, tflops = 0, tbps = 0, flops = 0, bytes = 0;
  bool valid = false;
  std::string check;
  double max_err = 0, bound = 0;
  int iters = 0;
  std::size_t items = 0, combines = 0;
  std::string kernel;  // decode: tile or heads
};

// Sampled rows of the batch the validation compares.
std::vector<int> sample_rows(const HybridBatch& batch, std::mt19937_64& rng) {
  std::vector<int> rows;
  const int n = batch.num_tokens();
  if (!batch.decodes.empty()) {
    for (int i = 0; i < std::min<int>(8, n); ++i) rows.push_back(i * (n / std::min(8, n)));
    rows.push_back(n - 1);
  } else {
    for (int r : {0, 1, 127, 128, n / 2, n - 129, n - 128, n - 1}) {
      if (r >= 0 && r < n) rows.push_back(r);
    }
    std::uniform_int_distribution<int> any(0, n - 1);
    for (int i = 0; i < 8; ++i) rows.push_back(any(rng));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

float bits_to_float(DType dtype, std::uint16_t b) {
  return dtype == DType::bf16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
}
float round_to(DType dtype, float x) {
  return dtype == DType::bf16 ? bf16_bits_to_float(float_to_bf16_bits(x))
                              : half_bits_to_float(float_to_half_bits(x));
}

// The decode kernel a plan runs on this device: "tile", "heads" or "deep",
// plus "+cluster<S>" when its splits merge as clusters of S CTAs.
std::string decode_kernel_name(const attention::AttentionPlan& plan) {
  const bool heads = plan.decode_kernel() == attention::DecodeKernel::heads;
  const attention::AttentionDims& dims = plan.dims();
  if (plan.decode_kernel() == attention::DecodeKernel::tile_deep) {
    return attention::detail::decode_deep_supported(dims.dtype, dims.head_dim)
               ? "deep"
               : "tile (deep unsupported)";
  }
  const std::string name = heads ? "heads" : "tile";
  if (plan.decode_cluster_size() > 0 && plan.kernel_options().decode_merge_in_kernel &&
      (heads ? attention::detail::decode_heads_cluster_supported(dims.dtype, dims.head_dim)
             : attention::detail::decode_cluster_supported(dims.dtype, dims.head_dim))) {
    return name + "+cluster" + std::to_string(plan.decode_cluster_size());
  }
  return name;
}

Status run_case(const Case& c, const Args& args, const AttentionDims& dims, int sm_count,
                std::size_t l2_bytes, cudaStream_t stream, std::vector<Row>& rows,
                std::vector<AbResult>& ab) {
  const HybridBatch batch = make_batch(c);
  const int ctx = std::max(c.cached_len + c.num_new, c.lead_cached + c.lead_new);
  const int slots = c.batch + (c.lead_new > 0 ? 1 : 0);
  const int tokens = batch.num_tokens();
  const float scale = 1.f / std::sqrt(static_cast<float>(dims.head_dim));
  const double flops = attention_flops(c, dims);
  const double bytes = attention_bytes(c, dims);

  PlanOptions options{sm_count, args.prefill_splits, args.decode_splits};
  options.decode_cluster_merge = !args.counter_merge;
  options.kernels = args.kernels;
  VPOD_ASSIGN_OR_RETURN(options.decode_cluster_slots, attention::query_decode_cluster_slots(dims));
  VPOD_ASSIGN_OR_RETURN(options.ws_prefill_ctas_per_sm,
                        attention::query_ws_prefill_ctas_per_sm(dims));
  if (args.decode_kernel == "tile") options.decode_kernel = attention::DecodeKernel::tile;
  if (args.decode_kernel == "heads") options.decode_kernel = attention::DecodeKernel::heads;
  if (args.decode_kernel == "deep") options.decode_kernel = attention::DecodeKernel::tile_deep;
  VPOD_ASSIGN_OR_RETURN(AttentionPlan contiguous_plan, AttentionPlan::create(batch, dims, options));
  VPOD_ASSIGN_OR_RETURN(auto metadata,
                        cuda::DeviceBuffer::allocate(contiguous_plan.metadata_bytes()));
  VPOD_ASSIGN_OR_RETURN(auto workspace,
                        cuda::DeviceBuffer::allocate(contiguous_plan.workspace_bytes()));
  const AttentionBuffers buffers{metadata.data(), metadata.bytes(), workspace.data(),
                                 workspace.bytes()};
  const AttentionPlan* active = &contiguous_plan;  // the plan run_attention launches
  VPOD_RETURN_IF_ERROR(active->upload(buffers, stream));
  const AttentionPlan& plan = contiguous_plan;
  // The paged layouts run the paged baseline, FlashInfer's kernels, planned
  // for the batch once its block table is known (eager mode, as FlashInfer's
  // wrappers plan outside CUDA graphs).
  attention::fi::PagedPlan flashinfer_plan;

  // Input sets: q, out and a per-layer cache each; enough sets to exceed L2 3x.
  const std::size_t elem = dtype_size(dims.dtype);
  const std::size_t q_bytes =
      static_cast<std::size_t>(tokens) * dims.num_q_heads * dims.head_dim * elem;
  const std::size_t token_elems = static_cast<std::size_t>(dims.num_kv_heads) * dims.head_dim;
  const std::size_t kv_bytes = static_cast<std::size_t>(slots) * ctx * token_elems * elem;
  const std::size_t set_bytes = 2 * q_bytes + 2 * kv_bytes;
  const int sets = static_cast<int>(
      std::clamp<std::size_t>((3 * l2_bytes + set_bytes - 1) / set_bytes, 1, kMaxSets));
  std::vector<cuda::DeviceBuffer> q(sets), out(sets), k(sets), v(sets);
  for (int s = 0; s < sets; ++s) {
    VPOD_ASSIGN_OR_RETURN(q[s], cuda::DeviceBuffer::allocate(q_bytes));
    VPOD_ASSIGN_OR_RETURN(out[s], cuda::DeviceBuffer::allocate(q_bytes));
    VPOD_ASSIGN_OR_RETURN(k[s], cuda::DeviceBuffer::allocate(kv_bytes));
    VPOD_ASSIGN_OR_RETURN(v[s], cuda::DeviceBuffer::allocate(kv_bytes));
    fill_random(q[s], 1000 + s, dims.dtype, stream);
    fill_random(k[s], 2000 + s, dims.dtype, stream);
    fill_random(v[s], 3000 + s, dims.dtype, stream);
  }
  auto token_view = [&](cuda::DeviceBuffer& b, int heads) {
    return TensorView(b.data(), dims.dtype, {tokens, heads, dims.head_dim}, Device::cuda);
  };
  auto per_layer_view = [&](int s) {
    KvLayerView kv;
    kv.k = k[s].data();
    kv.v = v[s].data();
    kv.dtype = dims.dtype;
    kv.device = Device::cuda;
    kv.num_slots = slots;
    kv.max_ctx = ctx;
    kv.num_kv_heads = dims.num_kv_heads;
    kv.head_dim = dims.head_dim;
    kv.head_stride = dims.head_dim;
    kv.token_stride = static_cast<std::int64_t>(token_elems);
    kv.slot_stride = static_cast<std::int64_t>(token_elems) * ctx;
    return kv;
  };
  // Copies per-layer set s into another layout with the append kernel: the
  // per-layer cache, read as [slots * ctx, kv_heads, head_dim], is the "new
  // tokens" of a batch that prefills every slot from position 0.
  Case fill_case = c;
  fill_case.decode = false;
  fill_case.cached_len = 0;
  fill_case.num_new = ctx;
  fill_case.lead_cached = 0;
  fill_case.lead_new = c.lead_new > 0 ? ctx : 0;
  const HybridBatch fill_batch = make_batch(fill_case);
  VPOD_ASSIGN_OR_RETURN(AttentionPlan fill_plan,
                        AttentionPlan::create(fill_batch, dims, {sm_count, 0, 0}));
  VPOD_ASSIGN_OR_RETURN(auto fill_metadata,
                        cuda::DeviceBuffer::allocate(fill_plan.metadata_bytes()));
  const AttentionBuffers fill_buffers{fill_metadata.data(), fill_metadata.bytes(), nullptr, 0};
  VPOD_RETURN_IF_ERROR(fill_plan.upload(fill_buffers, stream));
  auto source_view = [&](cuda::DeviceBuffer& b) {
    return TensorView(b.data(), dims.dtype,
                      {static_cast<std::int64_t>(slots) * ctx, dims.num_kv_heads, dims.head_dim},
                      Device::cuda);
  };

  auto run_attention = [&](auto&& kv_of_set, int s) -> Status {
    const auto kv = kv_of_set(s);
    if constexpr (std::is_same_v<std::decay_t<decltype(kv)>, PagedKvView>) {
      return c.decode
                 ? flashinfer_plan.decode(token_view(q[s], dims.num_q_heads), kv,
                                          token_view(out[s], dims.num_q_heads), scale, stream)
                 : flashinfer_plan.prefill(token_view(q[s], dims.num_q_heads), kv,
                                           token_view(out[s], dims.num_q_heads), scale, stream);
    } else {
      return c.decode ? attention::decode(*active, buffers, token_view(q[s], dims.num_q_heads), kv,
                                          token_view(out[s], dims.num_q_heads), scale, stream)
                      : attention::prefill(*active, buffers, token_view(q[s], dims.num_q_heads), kv,
                                           token_view(out[s], dims.num_q_heads), scale, stream);
    }
  };

  // ---- per-layer: validate against the CPU reference, then time.
  std::vector<std::uint16_t> reference_out(q_bytes / 2);
  // The fp32 and naive references of set 0 on the checked rows (kept for the
  // paged layouts, whose kernels are not vpod's).
  std::vector<float> exact, naive;
  std::vector<int> check_rows;
  auto reference_error = [&](const std::vector<std::uint16_t>& got, Row& row) {
    double err = 0, naive_err = 0, atol = 0;
    bool finite = true;
    for (std::uint16_t b : got) finite = finite && std::isfinite(bits_to_float(dims.dtype, b));
    const std::size_t row_elems = static_cast<std::size_t>(dims.num_q_heads) * dims.head_dim;
    for (int r : check_rows) {
      for (std::size_t j = 0; j < row_elems; ++j) {
        const std::size_t i = r * row_elems + j;
        err = std::max<double>(err, std::abs(bits_to_float(dims.dtype, got[i]) - exact[i]));
        naive_err = std::max<double>(naive_err, std::abs(naive[i] - exact[i]));
        atol = std::max<double>(
            atol,
            2.0 * std::abs(round_to(dims.dtype, round_to(dims.dtype, exact[i] + 0.3f) - 0.3f) -
                           exact[i]));
      }
    }
    row.max_err = err;
    row.bound = 2 * naive_err + atol;
    row.valid = finite && err <= row.bound;
    row.check = fmt::format("{} err {:.1e} <= {:.1e}", row.valid ? "ok" : "FAIL", err, row.bound);
    if (!finite) row.check = "FAIL non-finite output";
  };
  auto validate_reference = [&](Row& row) -> Status {
    VPOD_RETURN_IF_ERROR(run_attention(per_layer_view, 0));
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
    out[0].copy_to_host(reference_out.data(), q_bytes);
    std::vector<std::uint16_t> hq(q_bytes / 2), hk(kv_bytes / 2), hv(kv_bytes / 2);
    q[0].copy_to_host(hq.data(), q_bytes);
    k[0].copy_to_host(hk.data(), kv_bytes);
    v[0].copy_to_host(hv.data(), kv_bytes);
    KvLayerView host_kv = per_layer_view(0);
    host_kv.k = hk.data();
    host_kv.v = hv.data();
    host_kv.device = Device::cpu;
    std::mt19937_64 rng(7);
    check_rows = sample_rows(batch, rng);
    const std::size_t n = q_bytes / 2;
    exact.assign(n, 0.0f);
    naive.assign(n, 0.0f);
    const TensorView hq_view(hq.data(), dims.dtype, {tokens, dims.num_q_heads, dims.head_dim});
    const TensorView exact_view(exact.data(), DType::f32,
                                {tokens, dims.num_q_heads, dims.head_dim});
    const TensorView naive_view(naive.data(), DType::f32,
                                {tokens, dims.num_q_heads, dims.head_dim});
    VPOD_RETURN_IF_ERROR(attention::reference_attention(batch, dims, hq_view, host_kv, exact_view,
                                                        scale, attention::ReferencePrecision::fp32,
                                                        attention::ReferencePart::all, check_rows));
    VPOD_RETURN_IF_ERROR(attention::reference_attention(batch, dims, hq_view, host_kv, naive_view,
                                                        scale, attention::ReferencePrecision::naive,
                                                        attention::ReferencePart::all, check_rows));
    reference_error(reference_out, row);
    return Status();
  };
  // A paged layout (FlashInfer's kernels) against the same reference.
  // `launch` (set 0, into out[0], poisoned first) against the same reference:
  // the paged layouts, the wgmma tile and the FA3 peer.
  auto validate_launch = [&](auto&& launch, Row& row) -> Status {
    out[0].fill_bytes(0xff, stream);
    VPOD_RETURN_IF_ERROR(launch());
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
    std::vector<std::uint16_t> got(q_bytes / 2);
    out[0].copy_to_host(got.data(), q_bytes);
    reference_error(got, row);
    return Status();
  };
  auto validate_bitwise = [&](auto&& kv_of_set, Row& row) -> Status {
    out[0].fill_bytes(0xff, stream);
    VPOD_RETURN_IF_ERROR(run_attention(kv_of_set, 0));
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
    std::vector<std::uint16_t> got(q_bytes / 2);
    out[0].copy_to_host(got.data(), q_bytes);
    std::size_t differ = 0, first = got.size();
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != reference_out[i]) {
        if (differ++ == 0) first = i;
      }
    }
    row.valid = differ == 0;
    row.check = row.valid ? "ok == per_layer"
                          : fmt::format("FAIL != per_layer ({} of {} elements, first at {})",
                                        differ, got.size(), first);
    return Status();
  };

  auto add_row = [&](const std::string& layout, Row row, const Timing& t) {
    row.case_name = c.name;
    row.layout = layout;
    row.ms = t.median_ms;
    row.iters = t.iters;
    row.flops = flops;
    row.bytes = bytes;
    row.tflops = flops / (t.median_ms * 1e-3) / 1e12;
    row.tbps = bytes / (t.median_ms * 1e-3) / 1e12;
    if (layout == "fi_fa3") {
      row.kernel = "flashinfer fa3 single";
    } else if (layout.starts_with("paged")) {
      // FlashInfer's kernels: its work lists are its own.
      row.kernel = c.decode ? "flashinfer fa2 tc-decode"
                   : flashinfer_plan.prefill_backend() == attention::fi::PrefillBackend::fa3
                       ? "flashinfer fa3"
                       : "flashinfer fa2";
    } else {
      const AttentionPlan& ran = *active;
      row.items = c.decode ? ran.decode_items().size() : ran.prefill_items().size();
      row.combines = c.decode ? ran.decode_combines().size() : ran.prefill_combines().size();
      if (c.decode) row.kernel = decode_kernel_name(ran);
    }
    rows.push_back(row);
  };
  auto wants = [&](const char* layout) {
    return std::find(args.layouts.begin(), args.layouts.end(), layout) != args.layouts.end();
  };

  Row per_layer_row;
  VPOD_RETURN_IF_ERROR(validate_reference(per_layer_row));
  if (wants("per_layer")) {
    Status launch_status;
    const Timing t = time_runs(args, sets, stream, [&](int s) {
      if (launch_status.ok()) launch_status = run_attention(per_layer_view, s);
    });
    VPOD_RETURN_IF_ERROR(launch_status);
    add_row("per_layer", per_layer_row, t);
  }

  // ---- per_layer-tile: the same cache on the one-warpgroup wgmma tile that
  // the warp-specialized prefill kernel replaced (prefill cases).
  if (!c.decode && wants("per_layer-tile")) {
    PlanOptions tile_options = options;
    tile_options.kernels.ws_prefill = false;
    VPOD_ASSIGN_OR_RETURN(AttentionPlan tile_plan,
                          AttentionPlan::create(batch, dims, tile_options));
    VPOD_RETURN_IF_ERROR(tile_plan.upload(buffers, stream));
    active = &tile_plan;
    Row row;
    VPOD_RETURN_IF_ERROR(validate_launch([&] { return run_attention(per_layer_view, 0); }, row));
    Status launch_status;
    const Timing t = time_runs(args, sets, stream, [&](int s) {
      if (launch_status.ok()) launch_status = run_attention(per_layer_view, s);
    });
    VPOD_RETURN_IF_ERROR(launch_status);
    add_row("per_layer-tile", row, t);
    active = &contiguous_plan;
    VPOD_RETURN_IF_ERROR(contiguous_plan.upload(buffers, stream));
  }

  // ---- fi_fa3: FlashInfer's FA3 single prefill on the per-layer cache (one
  // request; compiled in with -DVPOD_BENCH_PEERS=ON), the contiguous peer.
  if (!c.decode && c.batch == 1 && c.lead_new == 0 && wants("fi_fa3")) {
    auto fa3 = [&](int s) {
      peers::SinglePrefillArgs a;
      a.dtype = dims.dtype;
      a.q = q[s].data();
      a.k = k[s].data();
      a.v = v[s].data();
      a.o = out[s].data();
      a.qo_len = c.num_new;
      a.kv_len = ctx;
      a.num_qo_heads = dims.num_q_heads;
      a.num_kv_heads = dims.num_kv_heads;
      a.head_dim = dims.head_dim;
      a.q_stride_n = static_cast<std::int64_t>(dims.num_q_heads) * dims.head_dim;
      a.kv_stride_n = static_cast<std::int64_t>(token_elems);
      a.sm_scale = scale;
      return peers::fi_fa3_single_prefill(a, stream);
    };
    Row row;
    const Status first = validate_launch([&] { return fa3(0); }, row);
    if (first.code() == StatusCode::unimplemented) {  // a build without the peer
      row.check = "skipped: " + first.message();
      add_row("fi_fa3", row, Timing{});
    } else {
      VPOD_RETURN_IF_ERROR(first);
      Status launch_status;
      const Timing t = time_runs(args, sets, stream, [&](int s) {
        if (launch_status.ok()) launch_status = fa3(s);
      });
      VPOD_RETURN_IF_ERROR(launch_status);
      add_row("fi_fa3", row, t);
      if (args.ab_rounds > 0 && wants("per_layer")) {
        AbResult r{c.name, {}, {}};
        for (int round = 0; round < args.ab_rounds; ++round) {
          for (int k = 0; k < 2; ++k) {
            const bool vpod = (k == 0) == (round % 2 == 0);
            const Timing tk = time_runs(args, sets, stream, [&](int s) {
              if (!launch_status.ok()) return;
              launch_status = vpod ? run_attention(per_layer_view, s) : fa3(s);
            });
            VPOD_RETURN_IF_ERROR(launch_status);
            (vpod ? r.vpod_ms : r.fa3_ms).push_back(tk.median_ms);
          }
        }
        ab.push_back(std::move(r));
      }
    }
  }

  // ---- all-layers: one [slots, ctx, 32, kv_heads, head_dim] cache; set s is layer s.
  if (wants("all_layers")) {
    const std::size_t all_bytes = kv_bytes * kAllLayers;
    auto all_k = cuda::DeviceBuffer::allocate(all_bytes);
    auto all_v = cuda::DeviceBuffer::allocate(all_bytes);
    if (!all_k.ok() || !all_v.ok()) {
      Row row;
      row.check = "skipped: out of memory";
      add_row("all_layers", row, Timing{});
    } else {
      auto all_view = [&](int s) {
        KvLayerView kv = per_layer_view(0);
        kv.k = static_cast<char*>(all_k->data()) + s * token_elems * elem;
        kv.v = static_cast<char*>(all_v->data()) + s * token_elems * elem;
        kv.token_stride = static_cast<std::int64_t>(token_elems) * kAllLayers;
        kv.slot_stride = kv.token_stride * ctx;
        return kv;
      };
      for (int s = 0; s < sets; ++s) {
        VPOD_RETURN_IF_ERROR(attention::append_kv(fill_plan, fill_buffers, source_view(k[s]),
                                                  source_view(v[s]), all_view(s), stream));
      }
      Row row;
      VPOD_RETURN_IF_ERROR(validate_bitwise(all_view, row));
      Status launch_status;
      const Timing t = time_runs(args, sets, stream, [&](int s) {
        if (launch_status.ok()) launch_status = run_attention(all_view, s);
      });
      VPOD_RETURN_IF_ERROR(launch_status);
      add_row("all_layers", row, t);
    }
  }

  // ---- paged (FlashInfer 0.7.2.post1's kernels): a pool of blocks per set,
  // one block-table row per slot. pagedN: the blocks in a random order over
  // the pool, as a serving cache's free list hands them out after churn;
  // pagedN-sequential: each slot's blocks in order, as a fresh pool does
  // (FlashInfer's own benchmarks use such arange page lists).
  struct PagedLayout {
    int block_size;
    bool sequential;
  };
  for (const PagedLayout pl : {PagedLayout{16, false}, PagedLayout{256, false},
                               PagedLayout{16, true}, PagedLayout{256, true}}) {
    const int block_size = pl.block_size;
    const std::string layout =
        fmt::format("paged{}{}", block_size, pl.sequential ? "-sequential" : "");
    if (!wants(layout.c_str())) continue;
    if (const Status supported = attention::fi::paged_attention_supported(dims); !supported.ok()) {
      Row row;
      row.check = "skipped: " + supported.message();
      add_row(layout, row, Timing{});
      continue;
    }
    const int blocks_per_slot = (ctx + block_size - 1) / block_size;
    const int num_blocks = slots * blocks_per_slot;
    std::vector<std::int32_t> table(static_cast<std::size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    if (!pl.sequential) std::shuffle(table.begin(), table.end(), std::mt19937_64(block_size));
    VPOD_ASSIGN_OR_RETURN(auto table_dev, cuda::DeviceBuffer::allocate(table.size() * 4));
    // On `stream` (non-blocking): a cudaMemcpy on the legacy stream may return
    // before its DMA lands, and the fill below raced with it (paged16 at 64 x
    // 8192 then failed the bitwise check in a full run).
    VPOD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table_dev.data(), table.data(), table.size() * 4,
                                              cudaMemcpyHostToDevice, stream),
                              StatusCode::internal);
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
    const std::size_t pool_bytes =
        static_cast<std::size_t>(num_blocks) * block_size * token_elems * elem;
    std::vector<cuda::DeviceBuffer> pk(sets), pv(sets);
    for (int s = 0; s < sets; ++s) {
      VPOD_ASSIGN_OR_RETURN(pk[s], cuda::DeviceBuffer::allocate(pool_bytes));
      VPOD_ASSIGN_OR_RETURN(pv[s], cuda::DeviceBuffer::allocate(pool_bytes));
    }
    auto paged_view = [&](int s) {
      PagedKvView kv;
      kv.k = pk[s].data();
      kv.v = pv[s].data();
      kv.dtype = dims.dtype;
      kv.device = Device::cuda;
      kv.num_blocks = num_blocks;
      kv.block_size = block_size;
      kv.num_kv_heads = dims.num_kv_heads;
      kv.head_dim = dims.head_dim;
      kv.head_stride = dims.head_dim;
      kv.token_stride = static_cast<std::int64_t>(token_elems);
      kv.block_stride = static_cast<std::int64_t>(token_elems) * block_size;
      kv.block_table = table_dev.as<const std::int32_t>();
      kv.num_slots = slots;
      kv.max_blocks_per_slot = blocks_per_slot;
      return kv;
    };
    for (int s = 0; s < sets; ++s) {
      VPOD_RETURN_IF_ERROR(attention::append_kv(fill_plan, fill_buffers, source_view(k[s]),
                                                source_view(v[s]), paged_view(s), stream));
    }
    Row row;
    VPOD_ASSIGN_OR_RETURN(const bool moved, flashinfer_plan.build(batch, dims, paged_view(0),
                                                                  /*cuda_graph=*/false, stream));
    (void)moved;  // nothing recorded yet
    VPOD_RETURN_IF_ERROR(validate_launch([&] { return run_attention(paged_view, 0); }, row));
    Status launch_status;
    const Timing t = time_runs(args, sets, stream, [&](int s) {
      if (launch_status.ok()) launch_status = run_attention(paged_view, s);
    });
    VPOD_RETURN_IF_ERROR(launch_status);
    add_row(layout, row, t);
  }
  VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
  std::fprintf(stderr, "[attention bench] %s: %d input sets, %zu %s items, %zu combines%s\n",
               c.name.c_str(), sets,
               c.decode ? plan.decode_items().size() : plan.prefill_items().size(),
               c.decode ? "decode" : "prefill",
               c.decode ? plan.decode_combines().size() : plan.prefill_combines().size(),
               c.decode ? (", " + decode_kernel_name(plan) + " kernel").c_str() : "");
  return Status();
}

int run(const Args& args) {
  auto dtype = parse_dtype(args.dtype);
  if (!dtype.ok()) {
    fmt::print(stderr, "vpod bench attention: {}\n", dtype.status().message());
    return 2;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    fmt::print(stderr, "vpod bench attention: no CUDA GPU\n");
    return 1;
  }
  const AttentionDims dims{32, 8, 128, *dtype};
  auto stream = cuda::Stream::create();
  if (!stream.ok()) {
    fmt::print(stderr, "vpod bench attention: {}\n", stream.status().to_string());
    return 1;
  }
  std::vector<Case> cases = all_cases();
  for (const std::string& shape : args.decode_shapes) {
    int batch = 0, ctx = 0;
    char x = 0;
    if (std::sscanf(shape.c_str(), "%d%c%d", &batch, &x, &ctx) != 3 || x != 'x' || batch < 1 ||
        ctx < 1) {
      fmt::print(stderr, "vpod bench attention: --decode-shape {}: expected BATCHxCONTEXT\n",
                 shape);
      return 2;
    }
    cases.push_back({fmt::format("decode {}x{}", batch, ctx), true, batch, ctx - 1, 1});
  }
  for (int n : args.prefill_shapes) {
    if (n < 1) {
      fmt::print(stderr, "vpod bench attention: --prefill-shape {}: expected tokens >= 1\n", n);
      return 2;
    }
    cases.push_back({fmt::format("prefill {}", n), false, 1, 0, n});
  }
  for (const std::string& shape : args.chunk_shapes) {
    int batch = 0, num_new = 0, cached = 0, lead_new = 0, lead_cached = 0, used = 0;
    const int fields = std::sscanf(shape.c_str(), "%dx%d@%d%n+%d@%d%n", &batch, &num_new, &cached,
                                   &used, &lead_new, &lead_cached, &used);
    if ((fields != 3 && fields != 5) || used != static_cast<int>(shape.size()) || batch < 1 ||
        num_new < 1 || cached < 0 || (fields == 5 && (lead_new < 1 || lead_cached < 0))) {
      fmt::print(stderr,
                 "vpod bench attention: --chunk-shape {}: expected BATCHxNEW@CACHED or "
                 "BATCHxNEW@CACHED+NEW@CACHED\n",
                 shape);
      return 2;
    }
    Case c{fmt::format("chunk {}x{} @{}", batch, num_new, cached + num_new), false, batch, cached,
           num_new};
    if (fields == 5) {
      c.name += fmt::format(" + {} @{}", lead_new, lead_cached + lead_new);
      c.lead_cached = lead_cached;
      c.lead_new = lead_new;
    }
    cases.push_back(c);
  }
  std::vector<Row> rows;
  std::vector<AbResult> ab;
  bool all_valid = true;
  const double read_ceiling =
      measure_read_ceiling_tbps(args, prop.multiProcessorCount, stream->get());
  for (const Case& c : cases) {
    if (!args.case_filter.empty() && c.name.find(args.case_filter) == std::string::npos) continue;
    const Status s = run_case(c, args, dims, prop.multiProcessorCount,
                              static_cast<std::size_t>(prop.l2CacheSize), stream->get(), rows, ab);
    if (!s.ok()) {
      fmt::print(stderr, "vpod bench attention: {}: {}\n", c.name, s.to_string());
      return 1;
    }
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  fmt::print("vpod bench attention  {}  {}  {} (32 q heads, 8 kv heads, head_dim 128)\n", date,
             prop.name, dtype_name(*dtype));
  fmt::print("read-only bandwidth ceiling (measured now, 2 GiB): {:.2f} TB/s\n", read_ceiling);
  fmt::print("{:<19} {:<14} {:>9} {:>8} {:>7} {:>6} {:>6} {:>8}  {}\n", "case", "layout", "ms",
             "TFLOP/s", "TB/s", "%771T", "%4.24", "vs p-l", "check");
  std::string last_case;
  double per_layer_ms = 0;
  for (const Row& r : rows) {
    if (r.case_name != last_case) per_layer_ms = 0;
    if (r.layout == "per_layer") per_layer_ms = r.ms;
    last_case = r.case_name;
    all_valid = all_valid && r.valid;
    fmt::print(
        "{:<19} {:<14} {:>9.4f} {:>8.1f} {:>7.2f} {:>5.1f}% {:>5.1f}% {:>8}  {}\n", r.case_name,
        r.layout, r.ms, r.tflops, r.tbps, 100 * r.tflops / kPeakTflops, 100 * r.tbps / kPeakTbps,
        per_layer_ms > 0 && r.ms > 0 ? fmt::format("{:.3f}x", per_layer_ms / r.ms) : "", r.check);
  }
  if (!ab.empty()) {
    fmt::print(
        "head to head, {} rounds alternating which runs first (medians of the rounds' "
        "medians; FA3 / vpod > 1: vpod faster)\n",
        args.ab_rounds);
    fmt::print("{:<19} {:>9} {:>9} {:>10} {:>17}\n", "case", "vpod ms", "FA3 ms", "FA3/vpod",
               "rounds min-max");
  }
  for (const AbResult& r : ab) {
    std::vector<double> ratios;
    for (std::size_t i = 0; i < r.vpod_ms.size(); ++i) ratios.push_back(r.fa3_ms[i] / r.vpod_ms[i]);
    fmt::print("{:<19} {:>9.4f} {:>9.4f} {:>9.3f}x {:>8.3f}-{:.3f}x\n", r.case_name,
               median_of(r.vpod_ms), median_of(r.fa3_ms), median_of(ratios),
               *std::min_element(ratios.begin(), ratios.end()),
               *std::max_element(ratios.begin(), ratios.end()));
  }
  if (!args.json_path.empty()) {
    json out;
    out["bench"] = "attention";
    out["date"] = date;
    out["gpu"] = prop.name;
    out["dtype"] = std::string(dtype_name(*dtype));
    out["peak_tflops"] = kPeakTflops;
    out["peak_tbps"] = kPeakTbps;
    out["read_ceiling_tbps"] = read_ceiling;
    out["decode_kernel"] = args.decode_kernel;
    out["decode_splits"] = args.decode_splits;
    out["heads"] = {
        {"q", dims.num_q_heads}, {"kv", dims.num_kv_heads}, {"head_dim", dims.head_dim}};
    for (const Case& c : cases) {
      out["shapes"].push_back({{"name", c.name},
                               {"decode", c.decode},
                               {"batch", c.batch},
                               {"cached_len", c.cached_len},
                               {"num_new", c.num_new},
                               {"lead_cached", c.lead_cached},
                               {"lead_new", c.lead_new}});
    }
    for (const Row& r : rows) {
      out["results"].push_back({{"case", r.case_name},
                                {"layout", r.layout},
                                {"ms", r.ms},
                                {"tflops", r.tflops},
                                {"tbps", r.tbps},
                                {"flops", r.flops},
                                {"bytes", r.bytes},
                                {"frac_peak_tflops", r.tflops / kPeakTflops},
                                {"frac_peak_tbps", r.tbps / kPeakTbps},
                                {"iters", r.iters},
                                {"work_items", r.items},
                                {"combines", r.combines},
                                {"decode_kernel", r.kernel},
                                {"valid", r.valid},
                                {"max_err", r.max_err},
                                {"bound", r.bound},
                                {"check", r.check}});
    }
    for (const AbResult& r : ab) {
      out["head_to_head"].push_back(
          {{"case", r.case_name}, {"vpod_ms", r.vpod_ms}, {"fa3_ms", r.fa3_ms}});
    }
    std::ofstream(args.json_path) << out.dump(2) << "\n";
  }
  if (!all_valid) {
    fmt::print(stderr, "vpod bench attention: VALIDATION FAILED (see the check column)\n");
    return 1;
  }
  return 0;
}

}  // namespace

void add_kernel_option_flags(CLI::App& cmd, attention::KernelOptions& options) {
  cmd.add_flag_callback(
      "--mma-prefill", [&options] { options.wgmma_prefill = false; },
      "prefill on the mma.sync kernel where the wgmma one would run (comparison)");
  cmd.add_flag_callback(
      "--no-ws-prefill", [&options] { options.ws_prefill = false; },
      "contiguous prefill on the one-warpgroup wgmma tile, not the warp-specialized kernel "
      "(comparison)");
  cmd.add_flag_callback(
      "--ws-head-major", [&options] { options.ws_head_major = true; },
      "the warp-specialized prefill walks its tiles head-major whatever their costs "
      "(experiment; default: only when they cost alike; multicast pairs walk item-major, so "
      "combine with --no-ws-multicast)");
  cmd.add_flag_callback(
      "--no-gqa-pack", [&options] { options.ws_gqa_pack = false; },
      "the warp-specialized prefill runs one query head per tile even where the plan allows a "
      "KV head's group in one (comparison)");
  cmd.add_flag_callback(
      "--no-ws-multicast", [&options] { options.ws_multicast = false; },
      "the warp-specialized prefill runs one CTA per tile, not clusters of 2 sharing each K/V "
      "block by TMA multicast (comparison)");
  cmd.add_flag_callback(
      "--no-lazy-max", [&options] { options.lazy_max = false; },
      "the prefill kernels (and POD's prefill side) move each row's running max on every rise, "
      "rescaling O, instead of only past a slack of 2^8 (comparison)");
  cmd.add_flag_callback(
      "--no-tma", [&options] { options.tma = false; },
      "the wgmma prefill tile loads contiguous K/V by cp.async, not TMA (comparison)");
  cmd.add_flag_callback(
      "--decode-combine-kernel", [&options] { options.decode_merge_in_kernel = false; },
      "merge decode KV splits with the separate combine kernel (comparison)");
  cmd.add_flag_callback(
      "--no-lazy-rescale", [&options] { options.wgmma_lazy_rescale = false; },
      "the wgmma prefill tile rescales O on every key block (comparison)");
}

void add_attention_bench(CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand(
      "attention",
      "Attention kernels on Llama-3-8B shapes: validate, then time (ms, TFLOP/s, TB/s)");
  cmd->add_option("--json", args->json_path, "write every result as JSON to this file");
  cmd->add_option("--case", args->case_filter, "only cases whose name contains this text");
  cmd->add_option("--layouts", args->layouts,
                  "per_layer all_layers paged16 paged256 (blocks shuffled over the pool), "
                  "paged16-sequential paged256-sequential (each slot's blocks in order), "
                  "per_layer-tile (prefill on the one-warpgroup wgmma tile), fi_fa3 (FlashInfer's "
                  "FA3 single prefill, contiguous; a -DVPOD_BENCH_PEERS=ON build)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "fp16 or bf16")->capture_default_str();
  cmd->add_option("--prefill-splits", args->prefill_splits,
                  "force KV splits per prefill tile (0: plan)");
  cmd->add_option("--decode-splits", args->decode_splits, "force KV splits per decode (0: plan)");
  cmd->add_option("--decode-kernel", args->decode_kernel,
                  "auto (the planner picks per batch), tile, heads or deep")
      ->check(CLI::IsMember({"auto", "tile", "heads", "deep"}))
      ->capture_default_str();
  cmd->add_flag("--counter-merge", args->counter_merge,
                "merge decode splits through the arrival counters, never as a cluster");
  add_kernel_option_flags(*cmd, args->kernels);
  cmd->add_option("--decode-shape", args->decode_shapes,
                  "extra decode cases BATCHxCONTEXT (e.g. 128x4096), after the fixed ones");
  cmd->add_option("--prefill-shape", args->prefill_shapes,
                  "extra one-shot prefill cases of N prompt tokens (e.g. 131072), after the "
                  "fixed ones");
  cmd->add_option("--chunk-shape", args->chunk_shapes,
                  "extra chunk cases BATCHxNEW@CACHED: BATCH sequences each adding NEW query "
                  "tokens over CACHED cached ones (e.g. 32x16@8192, a conversation's next turn); "
                  "+NEW@CACHED adds one more sequence first (16x16@8192+2048@0: turns beside a "
                  "long chunk)");
  cmd->add_option("--ab-rounds", args->ab_rounds,
                  "also time per_layer against fi_fa3 head to head, this many rounds "
                  "alternating which goes first")
      ->capture_default_str();
  cmd->add_option("--min-iters", args->min_iters, "fewest timed runs")->capture_default_str();
  cmd->add_option("--max-iters", args->max_iters, "most timed runs")->capture_default_str();
  cmd->callback([args] {
    const int rc = run(*args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace vpod::bench
