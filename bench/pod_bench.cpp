// `vpod bench pod`: POD-Attention (one fused launch per hybrid batch) against
// our serial prefill + decode kernels, on the four hybrid cases of
// docs/gpu.md and a paper-style random sweep (context 4K-20K, chunk 512-2K,
// decode batch 8-256, Llama-3-8B heads 32/8 and Yi-6B heads 32/4; head_dim
// 128). Per case: validate (POD's output against the serial kernels', every
// element), then time both (CUDA events, warm-up, median), and print the
// roofline bound max(FLOPs / 771 TFLOP/s, bytes / 4.24 TB/s). The sweep ends
// with the mean, median, min and max speedup and the fraction of cases within
// 1.25x of the bound. --json FILE writes every case (shapes included) for
// tools/bench_pod_peers.py, which times PyTorch SDPA (FA2, cuDNN) serially on
// the same shapes and prints the tables side by side.
// FlashInfer, compiled in as the paged baseline, runs the same cases in the
// same run (--peers named, the default, or all): its best serial composition
// (FA3 paged prefill + tensor-core decode) and its POD kernel
// (BatchPODWithPagedKVCacheWrapper's), page 16, over the same cache read as
// pages in order (block i of slot s = tokens [16i, 16i + 16) of the
// contiguous slot): the peer gets whatever contiguity is worth to it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/attention_bench_fill.h"
#include "bench/benches.h"
#include "common/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/event.h"
#include "cuda/stream.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/flashinfer/paged_plan.h"
#include "kernels/attention/pod.h"

namespace vpod::bench {
namespace {

using attention::AttentionBuffers;
using attention::AttentionDims;
using attention::AttentionPlan;
using attention::PodPlan;
using nlohmann::json;

constexpr double kPeakTflops = 771.0;  // docs/gpu.md: bf16 GEMM on the H200
constexpr double kPeakTbps = 4.24;     // device-to-device copy
constexpr int kMaxCtx = 20480;
constexpr int kMaxDecodes = 256;
constexpr int kMaxChunk = 2048;
constexpr int kPeerPage = 16;  // FlashInfer's page (vLLM's default block)
constexpr const char* kFlashInfer = "FlashInfer 0.7.2.post1";

struct PodCase {
  std::string name;
  bool named = false;
  int q_heads = 32, kv_heads = 8;
  int chunk = 0, chunk_ctx = 0;  // one prefill chunk ending at context chunk_ctx
  int decodes = 0, decode_ctx = 0;
};

std::vector<PodCase> named_cases() {
  auto c = [](const char* name, int chunk, int chunk_ctx, int decodes, int decode_ctx) {
    return PodCase{name, true, 32, 8, chunk, chunk_ctx, decodes, decode_ctx};
  };
  return {c("chunk 1024 @4096 + 64 @4096", 1024, 4096, 64, 4096),
          c("chunk 2048 @8192 + 32 @8192", 2048, 8192, 32, 8192),
          c("chunk 512 @16384 + 128 @2048", 512, 16384, 128, 2048),
          c("chunk 1024 @12288 + 64 @12288", 1024, 12288, 64, 12288)};
}

std::vector<PodCase> sweep_cases(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<PodCase> cases;
  for (int i = 0; i < n; ++i) {
    PodCase c;
    c.kv_heads = i % 2 == 0 ? 8 : 4;
    c.chunk = uniform(512, 2048);
    c.chunk_ctx = uniform(std::max(4096, c.chunk), kMaxCtx);
    c.decodes = uniform(8, kMaxDecodes);
    c.decode_ctx = uniform(4096, kMaxCtx);
    c.name = fmt::format("s{:03d} {}/{} {}@{} + {}@{}", i, c.q_heads, c.kv_heads, c.chunk,
                         c.chunk_ctx, c.decodes, c.decode_ctx);
    cases.push_back(c);
  }
  return cases;
}

// --cases "C@X+D@Y,...": a prefill chunk of C tokens after X cached tokens plus
// D decodes at context Y (the engine's hybrid steps, as `vpod bench model
// --hybrids` names them), with q_heads/kv_heads query/KV heads.
Result<std::vector<PodCase>> parse_cases(const std::string& text, int q_heads, int kv_heads) {
  std::vector<PodCase> cases;
  std::size_t begin = 0;
  while (begin <= text.size() && !text.empty()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    begin = end + 1;
    int chunk = 0, cached = 0, decodes = 0, ctx = 0, used = 0;
    if (std::sscanf(item.c_str(), " %d @ %d + %d @ %d %n", &chunk, &cached, &decodes, &ctx,
                    &used) != 4 ||
        used != static_cast<int>(item.size())) {
      return invalid_argument(fmt::format("--cases item '{}' is not C@X+D@Y", item));
    }
    if (chunk < 0 || chunk > kMaxChunk || cached < 0 || cached + chunk > kMaxCtx || decodes < 0 ||
        decodes > kMaxDecodes || (decodes > 0 && (ctx < 1 || ctx > kMaxCtx)) ||
        chunk + decodes == 0) {
      return invalid_argument(fmt::format(
          "--cases item '{}': needs 0 <= C <= {}, X + C <= {}, 0 <= D <= {}, 1 <= Y <= {} and C "
          "+ D > 0",
          item, kMaxChunk, kMaxCtx, kMaxDecodes, kMaxCtx));
    }
    PodCase c;
    c.name = fmt::format("{}@{}+{}@{} {}/{}", chunk, cached, decodes, ctx, q_heads, kv_heads);
    c.named = true;
    c.q_heads = q_heads;
    c.kv_heads = kv_heads;
    c.chunk = chunk;
    c.chunk_ctx = cached + chunk;
    c.decodes = decodes;
    c.decode_ctx = decodes > 0 ? ctx : 0;
    cases.push_back(c);
  }
  return cases;
}

struct Args {
  std::string json_path;
  std::string case_filter;
  std::string cases;  // --cases C@X+D@Y,...
  int q_heads = 32;   // heads of the --cases cases
  int kv_heads = 8;
  bool plan_only = false;  // CPU planning time only (no GPU needed)
  std::string dtype = "fp16";
  std::string ratio = "auto";
  bool no_fallback = false;  // PodOptions::serial_fallback = false
  int prefill_splits = 0;
  int decode_splits = 0;
  int sweep = 200;
  std::uint64_t seed = 2026;
  bool named = true;
  bool strict_prefill_limit = false;
  std::string prefill_tile = "auto";
  std::string peers = "named";       // FlashInfer's kernels on: named (and --cases), all, none
  bool compare_ratio = false;        // also time POD with the other ratio policy
  attention::KernelOptions kernels;  // --mma-prefill, --no-tma, ... (POD and serial)
  int min_iters = 10;
  int max_iters = 100;
  double target_ms = 150.0;
  double sweep_target_ms = 40.0;
};

HybridBatch make_batch(const PodCase& c) {
  HybridBatch b;
  int offset = 0;
  if (c.chunk > 0) {
    b.prefills.push_back({0, c.chunk_ctx - c.chunk, c.chunk, 0});
    offset = c.chunk;
  }
  for (int i = 0; i < c.decodes; ++i) b.decodes.push_back({1 + i, c.decode_ctx - 1, 1, offset++});
  b.token_ids.assign(offset, 0);
  return b;
}

double case_flops(const PodCase& c) {
  const double cached = c.chunk_ctx - c.chunk;
  const double prefill_pairs = c.chunk * cached + 0.5 * c.chunk * (c.chunk + 1.0);
  const double decode_pairs = static_cast<double>(c.decodes) * c.decode_ctx;
  return 4.0 * 128 * c.q_heads * (prefill_pairs + decode_pairs);
}

double case_bytes(const PodCase& c, std::size_t elem) {
  const double kv_row = 2.0 * c.kv_heads * 128 * elem;  // K and V of one token
  const double qo_row = 2.0 * c.q_heads * 128 * elem;   // Q read and O written
  return kv_row * (c.chunk_ctx + static_cast<double>(c.decodes) * c.decode_ctx) +
         qo_row * (c.chunk + c.decodes);
}

struct Timing {
  double median_ms = 0;
  int iters = 0;
};

template <typename Launch>
Timing time_runs(double target_ms, int min_iters, int max_iters, cudaStream_t stream,
                 Launch launch) {
  auto start = cuda::Event::create(cuda::Event::Timing::enabled).value();
  auto stop = cuda::Event::create(cuda::Event::Timing::enabled).value();
  constexpr int kWarmup = 3;
  start.record(stream);
  for (int i = 0; i < kWarmup; ++i) launch();
  stop.record(stream);
  stop.synchronize();
  const double warm_ms = cuda::Event::elapsed_ms(start, stop) / kWarmup;
  const int iters =
      std::clamp(static_cast<int>(target_ms / std::max(warm_ms, 1e-3)), min_iters, max_iters);
  std::vector<cuda::Event> events;
  for (int i = 0; i < 2 * iters; ++i) {
    events.push_back(cuda::Event::create(cuda::Event::Timing::enabled).value());
  }
  for (int i = 0; i < iters; ++i) {
    events[2 * i].record(stream);
    launch();
    events[2 * i + 1].record(stream);
  }
  events.back().synchronize();
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) ms[i] = cuda::Event::elapsed_ms(events[2 * i], events[2 * i + 1]);
  std::sort(ms.begin(), ms.end());
  return {ms[iters / 2], iters};
}

struct Row {
  PodCase c;
  double pod_ms = 0, serial_ms = 0, bound_ms = 0, flops = 0, bytes = 0;
  double other_ratio_ms = 0;  // --compare-ratio: POD with the other ratio policy
  double max_diff = 0;
  bool valid = false;
  attention::PodConfig config;
  attention::PodConfig other_config;  // --compare-ratio: the other ratio's plan
  int serial_prefill_items = 0, serial_decode_items = 0;
  // FlashInfer (0: not run): serial FA3 prefill + tensor-core decode, and its
  // POD kernel (fi_pod_fused false: its plan ran serially).
  double fi_serial_ms = 0, fi_pod_ms = 0;
  bool fi_pod_fused = false;
  double fi_max_diff = 0;
  bool fi_valid = true;
};

// Device state shared by the cases of one head configuration: one cache of
// kMaxDecodes + 1 slots x kMaxCtx tokens filled with random values once.
struct Bench {
  AttentionDims dims;
  attention::PodDevice device;
  cuda::DeviceBuffer k, v, q, out_pod, out_serial;
  cuda::DeviceBuffer pod_meta, pod_work, serial_meta, serial_work, other_meta, other_work;
  attention::PodCounters counters;
  KvLayerView kv;
  // The same K/V read as FlashInfer's NHD pages of kPeerPage tokens, in order.
  cuda::DeviceBuffer block_table, out_peer;
  PagedKvView paged;
  attention::fi::PagedPlan fi_serial, fi_pod;

  static Result<Bench> create(const AttentionDims& dims, bool allow_wgmma, cudaStream_t stream) {
    Bench b;
    b.dims = dims;
    VPOD_ASSIGN_OR_RETURN(b.device, attention::query_pod_device(dims, allow_wgmma));
    const std::size_t elem = dtype_size(dims.dtype);
    const std::size_t token = static_cast<std::size_t>(dims.num_kv_heads) * dims.head_dim;
    const std::size_t cache = (kMaxDecodes + 1) * static_cast<std::size_t>(kMaxCtx) * token * elem;
    VPOD_ASSIGN_OR_RETURN(b.k, cuda::DeviceBuffer::allocate(cache));
    VPOD_ASSIGN_OR_RETURN(b.v, cuda::DeviceBuffer::allocate(cache));
    fill_random_device(b.k.data(), cache / elem, 11 + dims.num_kv_heads, dims.dtype == DType::bf16,
                       stream);
    fill_random_device(b.v.data(), cache / elem, 22 + dims.num_kv_heads, dims.dtype == DType::bf16,
                       stream);
    const std::size_t qbytes =
        static_cast<std::size_t>(kMaxChunk + kMaxDecodes) * dims.num_q_heads * dims.head_dim * elem;
    VPOD_ASSIGN_OR_RETURN(b.q, cuda::DeviceBuffer::allocate(qbytes));
    VPOD_ASSIGN_OR_RETURN(b.out_pod, cuda::DeviceBuffer::allocate(qbytes));
    VPOD_ASSIGN_OR_RETURN(b.out_serial, cuda::DeviceBuffer::allocate(qbytes));
    fill_random_device(b.q.data(), qbytes / elem, 33, dims.dtype == DType::bf16, stream);
    VPOD_ASSIGN_OR_RETURN(b.counters, attention::PodCounters::create(stream));
    b.kv.k = b.k.data();
    b.kv.v = b.v.data();
    b.kv.dtype = dims.dtype;
    b.kv.device = Device::cuda;
    b.kv.num_slots = kMaxDecodes + 1;
    b.kv.max_ctx = kMaxCtx;
    b.kv.num_kv_heads = dims.num_kv_heads;
    b.kv.head_dim = dims.head_dim;
    b.kv.head_stride = dims.head_dim;
    b.kv.token_stride = static_cast<std::int64_t>(token);
    b.kv.slot_stride = static_cast<std::int64_t>(token) * kMaxCtx;
    constexpr int kBlocksPerSlot = kMaxCtx / kPeerPage;
    std::vector<std::int32_t> table(static_cast<std::size_t>(kMaxDecodes + 1) * kBlocksPerSlot);
    std::iota(table.begin(), table.end(), 0);
    VPOD_ASSIGN_OR_RETURN(b.block_table, cuda::DeviceBuffer::allocate(table.size() * 4));
    b.block_table.copy_from_host(table.data(), table.size() * 4);
    VPOD_ASSIGN_OR_RETURN(b.out_peer, cuda::DeviceBuffer::allocate(qbytes));
    b.paged.k = b.k.data();
    b.paged.v = b.v.data();
    b.paged.dtype = dims.dtype;
    b.paged.device = Device::cuda;
    b.paged.num_blocks = static_cast<int>(table.size());
    b.paged.block_size = kPeerPage;
    b.paged.num_kv_heads = dims.num_kv_heads;
    b.paged.head_dim = dims.head_dim;
    b.paged.head_stride = dims.head_dim;
    b.paged.token_stride = static_cast<std::int64_t>(token);
    b.paged.block_stride = static_cast<std::int64_t>(token) * kPeerPage;
    b.paged.block_table = b.block_table.as<const std::int32_t>();
    b.paged.num_slots = kMaxDecodes + 1;
    b.paged.max_blocks_per_slot = kBlocksPerSlot;
    // copy_from_host may return before a pageable copy lands.
    VPOD_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), StatusCode::internal);
    return b;
  }

  static Status ensure(cuda::DeviceBuffer& buffer, std::size_t bytes) {
    if (buffer.bytes() >= bytes && buffer.data() != nullptr) return Status();
    VPOD_ASSIGN_OR_RETURN(buffer, cuda::DeviceBuffer::allocate(std::max<std::size_t>(bytes, 256)));
    return Status();
  }
};

Result<attention::PodOptions> pod_options(const Args& args, const attention::PodDevice& device) {
  attention::PodOptions options;
  options.device = device;
  // auto: proportional unless the planner estimates the even policy faster.
  options.choose_ratio = args.ratio == "auto";
  VPOD_ASSIGN_OR_RETURN(options.ratio, attention::parse_pod_ratio(
                                           options.choose_ratio ? "proportional" : args.ratio));
  options.serial_fallback = !args.no_fallback;
  options.prefill_splits = args.prefill_splits;
  options.decode_splits = args.decode_splits;
  options.allow_beyond_prefill_limit = !args.strict_prefill_limit;
  options.kernels = args.kernels;
  return options;
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// --plan-only: the host cost of planning one step (the engine plans once per
// step, before the step's first kernel), in thread CPU time: PodPlan::build
// in the chosen mode and AttentionPlan::build (the serial plan), each into an
// object reused across the repetitions, as the engine reuses its plans. Runs without
// a GPU on an H200-like device (132 SMs, 2 CTAs per SM, wgmma prefill tile).
int plan_only(const Args& args, const std::vector<PodCase>& cases, DType dtype) {
  constexpr int kReps = 20;
  std::vector<double> sweep_pod, sweep_serial;
  fmt::print("vpod bench pod --plan-only: thread CPU time per plan (mean of {} plans)\n", kReps);
  fmt::print("{:<34} {:>10} {:>10}  {}\n", "case", "POD us", "serial us", "POD plan");
  for (const PodCase& c : cases) {
    const AttentionDims dims{c.q_heads, c.kv_heads, 128, dtype};
    attention::PodDevice device;
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
      auto queried = attention::query_pod_device(dims, args.prefill_tile != "mma");
      if (!queried.ok()) {
        fmt::print(stderr, "vpod bench pod: {}\n", queried.status().to_string());
        return 1;
      }
      device = *queried;
    } else {
      (void)cudaGetLastError();
      device.num_sms = 132;
      device.ctas_per_sm = 2;
      device.wgmma_prefill = args.prefill_tile != "mma";
      // An H200 runs the warp-specialized prefill, one CTA per SM.
      device.ws_prefill_ctas_per_sm = device.wgmma_prefill ? 1 : 0;
    }
    auto options = pod_options(args, device);
    if (!options.ok()) {
      fmt::print(stderr, "vpod bench pod: {}\n", options.status().to_string());
      return 2;
    }
    const HybridBatch batch = make_batch(c);
    std::string plan_text;
    double pod_us = 0, serial_us = 0;
    // Planned into the same objects, as the engine does (warm after the first).
    PodPlan plan;
    AttentionPlan serial;
    for (int r = 0; r < kReps; ++r) {
      const double t0 = thread_cpu_us();
      const Status pod_status = plan.build(batch, dims, *options);
      const double t1 = thread_cpu_us();
      const Status serial_status =
          serial.build(batch, dims,
                       {.num_sms = device.num_sms,
                        .kernels = options->kernels,
                        .decode_cluster_slots = device.decode_cluster_slots,
                        .ws_prefill_ctas_per_sm = device.ws_prefill_ctas_per_sm});
      const double t2 = thread_cpu_us();
      if (!pod_status.ok() || !serial_status.ok()) {
        fmt::print(stderr, "vpod bench pod: {}: {}\n", c.name,
                   (!pod_status.ok() ? pod_status : serial_status).to_string());
        return 1;
      }
      pod_us += t1 - t0;
      serial_us += t2 - t1;
      const attention::PodConfig& pc = plan.config();
      plan_text = pc.fused ? fmt::format("{}/{} {}+{} {} (estimate {:.0f} us, serial {:.0f} us)",
                                         pc.prefill_splits, pc.decode_splits, pc.prefill_ctas,
                                         pc.decode_ctas, attention::pod_ratio_name(pc.ratio),
                                         pc.estimate_us, pc.serial_estimate_us)
                           : fmt::format("serial fallback (estimate {:.0f} us, serial {:.0f} us)",
                                         pc.estimate_us, pc.serial_estimate_us);
    }
    pod_us /= kReps;
    serial_us /= kReps;
    if (c.named || cases.size() <= 40) {
      fmt::print("{:<34} {:>10.1f} {:>10.1f}  {}\n", c.name, pod_us, serial_us, plan_text);
    }
    if (!c.named) {
      sweep_pod.push_back(pod_us);
      sweep_serial.push_back(serial_us);
    }
  }
  if (!sweep_pod.empty()) {
    auto mean = [](const std::vector<double>& v) {
      return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    };
    fmt::print(
        "sweep of {} cases: POD plan mean {:.1f} us, max {:.1f} us; serial plan mean {:.1f} us, "
        "max {:.1f} us\n",
        sweep_pod.size(), mean(sweep_pod), *std::max_element(sweep_pod.begin(), sweep_pod.end()),
        mean(sweep_serial), *std::max_element(sweep_serial.begin(), sweep_serial.end()));
  }
  return 0;
}

Status run_case(const PodCase& c, const Args& args, Bench& b, cudaStream_t stream, Row& row) {
  const AttentionDims& dims = b.dims;
  const HybridBatch batch = make_batch(c);
  const int tokens = batch.num_tokens();
  const float scale = 1.f / std::sqrt(static_cast<float>(dims.head_dim));
  VPOD_ASSIGN_OR_RETURN(attention::PodOptions options, pod_options(args, b.device));
  options.explain = true;  // the plan column and the JSON say why
  VPOD_ASSIGN_OR_RETURN(PodPlan pod_plan, PodPlan::create(batch, dims, options));
  // The other ratio policy, planned for itself (the planner simulates the
  // policy, so its splits may differ) in its own buffers.
  attention::PodOptions other_options = options;
  other_options.choose_ratio = false;
  other_options.ratio = pod_plan.config().ratio == attention::PodRatio::even
                            ? attention::PodRatio::proportional
                            : attention::PodRatio::even;
  VPOD_ASSIGN_OR_RETURN(PodPlan other_plan, PodPlan::create(batch, dims, other_options));
  VPOD_ASSIGN_OR_RETURN(
      AttentionPlan serial_plan,
      AttentionPlan::create(batch, dims,
                            {.num_sms = b.device.num_sms,
                             .kernels = args.kernels,
                             .decode_cluster_slots = b.device.decode_cluster_slots,
                             .ws_prefill_ctas_per_sm = b.device.ws_prefill_ctas_per_sm}));
  const AttentionPlan& pp = pod_plan.attention();
  VPOD_RETURN_IF_ERROR(Bench::ensure(b.pod_meta, pp.metadata_bytes()));
  VPOD_RETURN_IF_ERROR(Bench::ensure(b.pod_work, pp.workspace_bytes()));
  VPOD_RETURN_IF_ERROR(Bench::ensure(b.other_meta, other_plan.attention().metadata_bytes()));
  VPOD_RETURN_IF_ERROR(Bench::ensure(b.other_work, other_plan.attention().workspace_bytes()));
  VPOD_RETURN_IF_ERROR(Bench::ensure(b.serial_meta, serial_plan.metadata_bytes()));
  VPOD_RETURN_IF_ERROR(Bench::ensure(b.serial_work, serial_plan.workspace_bytes()));
  const AttentionBuffers pod_buffers{b.pod_meta.data(), b.pod_meta.bytes(), b.pod_work.data(),
                                     b.pod_work.bytes()};
  const AttentionBuffers serial_buffers{b.serial_meta.data(), b.serial_meta.bytes(),
                                        b.serial_work.data(), b.serial_work.bytes()};
  const AttentionBuffers other_buffers{b.other_meta.data(), b.other_meta.bytes(),
                                       b.other_work.data(), b.other_work.bytes()};
  VPOD_RETURN_IF_ERROR(pod_plan.upload(pod_buffers, stream));
  VPOD_RETURN_IF_ERROR(other_plan.upload(other_buffers, stream));
  VPOD_RETURN_IF_ERROR(serial_plan.upload(serial_buffers, stream));
  auto view = [&](cuda::DeviceBuffer& buf) {
    return TensorView(buf.data(), dims.dtype, {tokens, dims.num_q_heads, dims.head_dim},
                      Device::cuda);
  };
  const TensorView q = view(b.q), out_pod = view(b.out_pod), out_serial = view(b.out_serial);
  Status launch_status;
  auto launch_pod = [&] {
    if (launch_status.ok()) {
      launch_status =
          attention::pod(pod_plan, pod_buffers, b.counters, q, b.kv, out_pod, scale, stream);
    }
  };
  auto launch_other = [&] {
    if (launch_status.ok()) {
      launch_status =
          attention::pod(other_plan, other_buffers, b.counters, q, b.kv, out_pod, scale, stream);
    }
  };
  auto launch_serial = [&] {
    if (launch_status.ok()) {
      launch_status =
          attention::prefill(serial_plan, serial_buffers, q, b.kv, out_serial, scale, stream);
    }
    if (launch_status.ok()) {
      launch_status =
          attention::decode(serial_plan, serial_buffers, q, b.kv, out_serial, scale, stream);
    }
  };

  // Validate: every element of POD's output against the serial kernels'.
  const std::size_t elems = static_cast<std::size_t>(tokens) * dims.num_q_heads * dims.head_dim;
  b.out_pod.fill_bytes(0xff, stream);
  b.out_serial.fill_bytes(0xff, stream);
  launch_pod();
  launch_serial();
  VPOD_RETURN_IF_ERROR(launch_status);
  VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
  std::vector<std::uint16_t> s(elems);
  b.out_serial.copy_to_host(s.data(), elems * 2);
  const double tolerance = dims.dtype == DType::bf16 ? 6e-2 : 1e-2;
  // The largest difference of `out` from the serial kernels' output (infinite
  // when an element is not finite).
  auto diff_from_serial = [&](const cuda::DeviceBuffer& out) {
    std::vector<std::uint16_t> a(elems);
    out.copy_to_host(a.data(), elems * 2);
    auto to_f = [&](std::uint16_t x) {
      return dims.dtype == DType::bf16 ? bf16_bits_to_float(x) : half_bits_to_float(x);
    };
    double diff = 0;
    for (std::size_t i = 0; i < elems; ++i) {
      const float x = to_f(a[i]), y = to_f(s[i]);
      if (!std::isfinite(x) || !std::isfinite(y)) return HUGE_VAL;
      diff = std::max<double>(diff, std::abs(x - y));
    }
    return diff;
  };
  row.c = c;
  row.max_diff = diff_from_serial(b.out_pod);
  row.valid = row.max_diff <= tolerance;
  row.config = pod_plan.config();
  row.other_config = other_plan.config();
  row.serial_prefill_items = static_cast<int>(serial_plan.prefill_items().size());
  row.serial_decode_items = static_cast<int>(serial_plan.decode_items().size());
  row.flops = case_flops(c);
  row.bytes = case_bytes(c, dtype_size(dims.dtype));
  row.bound_ms = std::max(row.flops / (kPeakTflops * 1e12), row.bytes / (kPeakTbps * 1e12)) * 1e3;

  const double target = c.named ? args.target_ms : args.sweep_target_ms;
  // Alternate the two so clock and thermal drift hit both alike.
  const Timing tp1 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_pod);
  const Timing ts1 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_serial);
  const Timing tp2 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_pod);
  const Timing ts2 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_serial);
  if (args.compare_ratio) {
    const Timing to1 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_other);
    const Timing tp3 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_pod);
    const Timing to2 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_other);
    row.other_ratio_ms = std::min(to1.median_ms, to2.median_ms);
    row.pod_ms = std::min({tp1.median_ms, tp2.median_ms, tp3.median_ms});
  } else {
    row.pod_ms = std::min(tp1.median_ms, tp2.median_ms);
  }
  VPOD_RETURN_IF_ERROR(launch_status);
  row.serial_ms = std::min(ts1.median_ms, ts2.median_ms);

  if (args.peers == "all" || (args.peers == "named" && c.named)) {
    // FlashInfer: plans made once (as its wrappers' plan()), launches timed.
    const TensorView out_peer = view(b.out_peer);
    for (auto [plan, mode] : {std::pair{&b.fi_serial, attention::fi::PagedMode::serial},
                              std::pair{&b.fi_pod, attention::fi::PagedMode::pod}}) {
      VPOD_RETURN_IF_ERROR(
          plan->build(batch, dims, b.paged, /*cuda_graph=*/false, stream, mode).status());
    }
    row.fi_pod_fused = b.fi_pod.fused();
    auto launch_fi = [&](const attention::fi::PagedPlan* plan) {
      return [&, plan] {
        if (launch_status.ok()) launch_status = plan->run(q, b.paged, out_peer, scale, stream);
      };
    };
    auto launch_fi_serial = launch_fi(&b.fi_serial);
    auto launch_fi_pod = launch_fi(&b.fi_pod);
    for (auto* launch : {&launch_fi_serial, &launch_fi_pod}) {
      b.out_peer.fill_bytes(0xff, stream);
      (*launch)();
      VPOD_RETURN_IF_ERROR(launch_status);
      VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
      row.fi_max_diff = std::max(row.fi_max_diff, diff_from_serial(b.out_peer));
    }
    row.fi_valid = row.fi_max_diff <= tolerance;
    const Timing f1 =
        time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_fi_serial);
    const Timing p1 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_fi_pod);
    const Timing f2 =
        time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_fi_serial);
    const Timing p2 = time_runs(target / 2, args.min_iters, args.max_iters, stream, launch_fi_pod);
    VPOD_RETURN_IF_ERROR(launch_status);
    row.fi_serial_ms = std::min(f1.median_ms, f2.median_ms);
    row.fi_pod_ms = std::min(p1.median_ms, p2.median_ms);
  }
  return Status();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int run(const Args& args) {
  auto dtype = parse_dtype(args.dtype);
  if (!dtype.ok()) {
    fmt::print(stderr, "vpod bench pod: {}\n", dtype.status().message());
    return 2;
  }
  std::vector<PodCase> cases;
  if (args.named) cases = named_cases();
  {
    auto custom = parse_cases(args.cases, args.q_heads, args.kv_heads);
    if (!custom.ok()) {
      fmt::print(stderr, "vpod bench pod: {}\n", custom.status().message());
      return 2;
    }
    cases.insert(cases.end(), custom->begin(), custom->end());
  }
  for (const PodCase& c : sweep_cases(args.sweep, args.seed)) cases.push_back(c);
  if (!args.case_filter.empty()) {
    std::erase_if(cases, [&](const PodCase& c) {
      return c.name.find(args.case_filter) == std::string::npos;
    });
  }
  if (args.plan_only) return plan_only(args, cases, *dtype);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    fmt::print(stderr, "vpod bench pod: no CUDA GPU\n");
    return 1;
  }
  auto stream = cuda::Stream::create();
  if (!stream.ok()) {
    fmt::print(stderr, "vpod bench pod: {}\n", stream.status().to_string());
    return 1;
  }
  std::vector<Row> rows;
  std::map<std::pair<int, int>, Bench> benches;  // by query and KV heads
  for (const PodCase& c : cases) {
    const std::pair<int, int> heads{c.q_heads, c.kv_heads};
    if (!benches.count(heads)) {
      auto b = Bench::create({c.q_heads, c.kv_heads, 128, *dtype}, args.prefill_tile != "mma",
                             stream->get());
      if (!b.ok()) {
        fmt::print(stderr, "vpod bench pod: {}\n", b.status().to_string());
        return 1;
      }
      benches.emplace(heads, std::move(*b));
    }
    Row row;
    const Status s = run_case(c, args, benches.at(heads), stream->get(), row);
    if (!s.ok()) {
      fmt::print(stderr, "vpod bench pod: {}: {}\n", c.name, s.to_string());
      return 1;
    }
    rows.push_back(row);
  }

  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const bool wgmma = !rows.empty() && rows.front().config.wgmma_prefill;
  fmt::print("vpod bench pod  {}  {}  {}  head_dim 128, ratio {}, POD prefill tile {}{}\n", date,
             prop.name, dtype_name(*dtype), args.ratio, wgmma ? "wgmma" : "mma.sync",
             args.strict_prefill_limit ? ", strict prefill limit (2 x SMs)" : "");
  fmt::print("{:<34} {:>9} {:>9} {:>8} {:>9} {:>8}  {:<26} {}\n", "case", "POD ms", "serial ms",
             "speedup", "bound ms", "POD/bnd", "plan (splits p/d, CTAs p+d)", "check");
  bool all_valid = true;
  std::vector<double> sweep_speedups, other_speedups;
  int within = 0, sweep_n = 0, fallbacks = 0, even = 0;
  for (const Row& r : rows) {
    all_valid = all_valid && r.valid;
    const double speedup = r.serial_ms / r.pod_ms;
    if (!r.c.named) {
      sweep_speedups.push_back(speedup);
      if (r.other_ratio_ms > 0) other_speedups.push_back(r.serial_ms / r.other_ratio_ms);
      ++sweep_n;
      within += r.pod_ms <= 1.25 * r.bound_ms;
      fallbacks += !r.config.fused;
      even += r.config.fused && r.config.ratio == attention::PodRatio::even;
    }
    const std::string plan =
        r.config.fused
            ? fmt::format("{}/{} {}+{} {}", r.config.prefill_splits, r.config.decode_splits,
                          r.config.prefill_ctas, r.config.decode_ctas,
                          r.config.ratio == attention::PodRatio::even ? "even" : "prop")
            : std::string("serial fallback");
    if (r.c.named || rows.size() <= 40 || !r.valid) {
      fmt::print("{:<34} {:>9.4f} {:>9.4f} {:>7.3f}x {:>9.4f} {:>7.2f}x  {:<26} {}\n", r.c.name,
                 r.pod_ms, r.serial_ms, speedup, r.bound_ms, r.pod_ms / r.bound_ms, plan,
                 r.valid ? fmt::format("ok (diff {:.1e})", r.max_diff)
                         : fmt::format("FAIL (diff {:.1e})", r.max_diff));
    }
  }
  if (sweep_n > 0) {
    double mean = 0;
    for (double x : sweep_speedups) mean += x;
    mean /= sweep_n;
    fmt::print(
        "sweep of {} cases (seed {}): speedup POD vs serial mean {:.3f}x, median {:.3f}x, "
        "min {:.3f}x, max {:.3f}x; within 1.25x of the bound: {}/{} ({:.1f}%)\n",
        sweep_n, args.seed, mean, median(sweep_speedups),
        *std::min_element(sweep_speedups.begin(), sweep_speedups.end()),
        *std::max_element(sweep_speedups.begin(), sweep_speedups.end()), within, sweep_n,
        100.0 * within / sweep_n);
    fmt::print("sweep plans: {} serial fallbacks, {} fused with ratio even, {} with proportional\n",
               fallbacks, even, sweep_n - fallbacks - even);
  }
  const char* other_ratio = "(the other policy than planned)";
  if (!other_speedups.empty()) {
    double mean = 0;
    for (double x : other_speedups) mean += x;
    mean /= static_cast<double>(other_speedups.size());
    int better = 0;
    for (const Row& r : rows) better += !r.c.named && r.other_ratio_ms < r.pod_ms;
    fmt::print(
        "sweep with ratio {} instead: speedup mean {:.3f}x, median {:.3f}x, min {:.3f}x, max "
        "{:.3f}x; faster than ratio {} on {}/{} cases\n",
        other_ratio, mean, median(other_speedups),
        *std::min_element(other_speedups.begin(), other_speedups.end()),
        *std::max_element(other_speedups.begin(), other_speedups.end()), args.ratio, better,
        static_cast<int>(other_speedups.size()));
  }
  // FlashInfer in the same run.
  std::vector<double> vs_fi_serial, vs_fi_pod;
  for (const Row& r : rows) {
    if (r.fi_serial_ms <= 0) continue;
    all_valid = all_valid && r.fi_valid;
    if (vs_fi_serial.empty()) {
      fmt::print(
          "{} in the same run (paged, page {}, pages in order): serial = FA3 prefill + tensor-core "
          "decode, POD = its POD kernel (FA2)\n",
          kFlashInfer, kPeerPage);
      fmt::print("{:<34} {:>9} {:>10} {:>9} {:>11} {:>11}  {}\n", "case", "POD ms", "FI ser ms",
                 "FI POD ms", "vs FI ser", "vs FI POD", "check");
    }
    vs_fi_serial.push_back(r.fi_serial_ms / r.pod_ms);
    vs_fi_pod.push_back(r.fi_pod_ms / r.pod_ms);
    if (r.c.named || rows.size() <= 40 || !r.fi_valid) {
      fmt::print("{:<34} {:>9.4f} {:>10.4f} {:>9.4f}{} {:>10.3f}x {:>10.3f}x  {}\n", r.c.name,
                 r.pod_ms, r.fi_serial_ms, r.fi_pod_ms, r.fi_pod_fused ? " " : "*",
                 r.fi_serial_ms / r.pod_ms, r.fi_pod_ms / r.pod_ms,
                 r.fi_valid ? fmt::format("ok (diff {:.1e})", r.fi_max_diff)
                            : fmt::format("FAIL (diff {:.1e})", r.fi_max_diff));
    }
  }
  if (vs_fi_serial.size() > 1) {
    auto mean = [](const std::vector<double>& v) {
      return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    };
    fmt::print(
        "over {} cases: vpod POD vs FlashInfer serial mean {:.3f}x (min {:.3f}x), vs FlashInfer "
        "POD mean {:.3f}x (min {:.3f}x){}\n",
        vs_fi_serial.size(), mean(vs_fi_serial),
        *std::min_element(vs_fi_serial.begin(), vs_fi_serial.end()), mean(vs_fi_pod),
        *std::min_element(vs_fi_pod.begin(), vs_fi_pod.end()),
        std::any_of(rows.begin(), rows.end(),
                    [](const Row& r) { return r.fi_serial_ms > 0 && !r.fi_pod_fused; })
            ? "; * FlashInfer planned that case serially (GQA group over 16)"
            : "");
  }
  for (const Row& r : rows) {
    if (r.c.named) {
      fmt::print("plan {}: {}\n", r.c.name, r.config.reason);
      if (r.other_ratio_ms > 0) {
        fmt::print("  ratio {}: {:.4f} ms ({:.3f}x of serial)\n", other_ratio, r.other_ratio_ms,
                   r.serial_ms / r.other_ratio_ms);
      }
    }
  }
  if (!args.json_path.empty()) {
    json out;
    out["bench"] = "pod";
    out["date"] = date;
    out["gpu"] = prop.name;
    out["dtype"] = std::string(dtype_name(*dtype));
    out["head_dim"] = 128;
    out["ratio"] = args.ratio;
    out["strict_prefill_limit"] = args.strict_prefill_limit;
    out["pod_prefill_tile"] = wgmma ? "wgmma" : "mma.sync";
    out["compare_ratio"] = args.compare_ratio;
    out["peak_tflops"] = kPeakTflops;
    out["peak_tbps"] = kPeakTbps;
    out["seed"] = args.seed;
    out["peer"] = fmt::format("{} paged, page {}", kFlashInfer, kPeerPage);
    for (const Row& r : rows) {
      out["results"].push_back({{"case", r.c.name},
                                {"named", r.c.named},
                                {"q_heads", r.c.q_heads},
                                {"kv_heads", r.c.kv_heads},
                                {"chunk", r.c.chunk},
                                {"chunk_ctx", r.c.chunk_ctx},
                                {"decodes", r.c.decodes},
                                {"decode_ctx", r.c.decode_ctx},
                                {"pod_ms", r.pod_ms},
                                {"serial_ms", r.serial_ms},
                                {"speedup", r.serial_ms / r.pod_ms},
                                {"other_ratio_ms", r.other_ratio_ms},
                                {"other_prefill_splits", r.other_config.prefill_splits},
                                {"other_decode_splits", r.other_config.decode_splits},
                                {"wgmma_prefill", r.config.wgmma_prefill},
                                {"bound_ms", r.bound_ms},
                                {"flops", r.flops},
                                {"bytes", r.bytes},
                                {"valid", r.valid},
                                {"max_diff", r.max_diff},
                                {"prefill_splits", r.config.prefill_splits},
                                {"decode_splits", r.config.decode_splits},
                                {"prefill_ctas", r.config.prefill_ctas},
                                {"decode_ctas", r.config.decode_ctas},
                                {"ctas_per_sm", r.config.ctas_per_sm},
                                {"estimate_us", r.config.estimate_us},
                                {"fused", r.config.fused},
                                {"ratio", attention::pod_ratio_name(r.config.ratio)},
                                {"serial_estimate_us", r.config.serial_estimate_us},
                                {"serial_prefill_estimate_us", r.config.serial_prefill_estimate_us},
                                {"prefill_beyond_limit", r.config.prefill_beyond_limit},
                                {"plan", r.config.reason},
                                {"serial_prefill_items", r.serial_prefill_items},
                                {"serial_decode_items", r.serial_decode_items},
                                {"fi_serial_ms", r.fi_serial_ms},
                                {"fi_pod_ms", r.fi_pod_ms},
                                {"fi_pod_fused", r.fi_pod_fused},
                                {"fi_valid", r.fi_valid},
                                {"fi_max_diff", r.fi_max_diff}});
    }
    std::ofstream(args.json_path) << out.dump(2) << "\n";
  }
  if (!all_valid) {
    fmt::print(stderr, "vpod bench pod: VALIDATION FAILED (see the check column)\n");
    return 1;
  }
  return 0;
}

}  // namespace

void add_pod_bench(CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand(
      "pod", "POD-Attention vs serial prefill+decode on hybrid batches: validate, time, roofline");
  cmd->add_option("--json", args->json_path, "write every case as JSON (for bench_pod_peers.py)");
  cmd->add_option("--case", args->case_filter, "only cases whose name contains this text");
  cmd->add_option("--cases", args->cases,
                  "extra cases C@X+D@Y,...: a prefill chunk of C tokens after X cached plus D "
                  "decodes at context Y (the engine's hybrid steps)");
  cmd->add_option("--q-heads", args->q_heads, "query heads of the --cases cases")
      ->capture_default_str();
  cmd->add_option("--kv-heads", args->kv_heads, "KV heads of the --cases cases")
      ->capture_default_str();
  cmd->add_flag("--plan-only", args->plan_only,
                "only time the host planning of every case (thread CPU time; no GPU needed)");
  cmd->add_option("--dtype", args->dtype, "fp16 or bf16")->capture_default_str();
  cmd->add_option("--ratio", args->ratio,
                  "auto (the planner picks per batch), proportional or even")
      ->check(CLI::IsMember({"auto", "proportional", "even"}))
      ->capture_default_str();
  cmd->add_flag("--no-fallback", args->no_fallback,
                "always run the fused kernel (no serial fallback when its estimate is slower)");
  cmd->add_flag("--compare-ratio", args->compare_ratio,
                "also time POD with the other ratio policy (same plan) and summarize it");
  cmd->add_option("--prefill-tile", args->prefill_tile,
                  "POD's prefill tile: auto (wgmma where the GPU runs it) or mma (the serial "
                  "prefill follows --mma-prefill)")
      ->check(CLI::IsMember({"auto", "mma"}))
      ->capture_default_str();
  cmd->add_option("--peers", args->peers,
                  "FlashInfer's serial and POD kernels on the same cases: named (the named and "
                  "--cases cases), all (the sweep too) or none")
      ->check(CLI::IsMember({"named", "all", "none"}))
      ->capture_default_str();
  add_kernel_option_flags(*cmd, args->kernels);
  cmd->add_option("--prefill-splits", args->prefill_splits, "force prefill KV splits (0: plan)");
  cmd->add_option("--decode-splits", args->decode_splits, "force decode KV splits (0: plan)");
  cmd->add_option("--sweep", args->sweep, "random sweep cases (0: none)")->capture_default_str();
  cmd->add_option("--seed", args->seed, "sweep seed")->capture_default_str();
  cmd->add_flag("!--no-named", args->named, "skip the four named cases");
  cmd->add_flag("--strict-prefill-limit", args->strict_prefill_limit,
                "never split prefill beyond 2 x SMs CTAs (the paper's rule as is)");
  cmd->add_option("--min-iters", args->min_iters, "fewest timed runs")->capture_default_str();
  cmd->add_option("--max-iters", args->max_iters, "most timed runs")->capture_default_str();
  cmd->callback([args] {
    const int rc = run(*args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace vpod::bench
