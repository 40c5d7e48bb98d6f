// `vpod bench model`: the model runtime on the GPU. Decode step time at
// several batch sizes and contexts against the bandwidth roofline (weights +
// KV bytes read at 4.24 TB/s), prefill throughput against the FLOP roofline
// (771 TFLOP/s, bf16 GEMM measured on the H200), and a step-time breakdown
// (GEMMs, attention, other kernels; host enqueue time). Decode steps run as
// CUDA graphs (the default) and eagerly; the breakdown comes from an eager
// step with per-op events. Also: the decode GEMV against cuBLASLt on the
// model's weight shapes at M = 1, and the GPU sampler's time per call.
// With --hybrids, hybrid steps (one prefill chunk + decodes) with the same
// breakdown, to compare --attention pod and serial inside the model.
// --kv-cache paged runs the decode, prefill and hybrid rows over a paged cache
// (the paged baseline's FlashInfer kernels; pages of --block-size tokens
// handed out in a shuffled order, as a long-running pool hands them out), so
// the same steps show where the time goes with either cache.
// Validates first: the logits of a step must be finite and not constant.
#include <cuda_runtime_api.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "bench/attention_bench_fill.h"
#include "bench/benches.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/event.h"
#include "cuda/stream.h"
#include "engine/engine_stack.h"
#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemv.h"
#include "kernels/sampling/sampling.h"
#include "model/memory_plan.h"
#include "model/model.h"

namespace vpod::bench {

namespace {

constexpr double kBandwidthCeiling = 4.24e12;  // B/s, device copy on the H200 (docs/gpu.md)
constexpr double kFlopCeiling = 771e12;        // FLOP/s, bf16 GEMM 8192^3 on the H200

struct ModelBenchArgs {
  std::string model, json, dtype = "bf16", attention = "serial";
  std::string batches = "1,16,64,256", contexts = "1024,2048,4096,8192", prefills = "4096,16384";
  std::string hybrids;  // "C@X+D@Y,...": a chunk of C tokens after X cached + D decodes at Y
  int iters = 10;
  double gpu_memory_utilization = 0.92;
  bool no_gemv = false;
  bool fuse = false, no_fuse_logits = false, pdl = false, pdl_early = false;
  int gemv_max_rows = kernels::kMaxGemvRows;
  std::string tuning_batches = "1,2,4";
  attention::KernelOptions kernels;  // the attention kernels' variant switches
  std::string kv_cache = "vattn";    // the decode, prefill and hybrid rows' cache
  std::string load_format = "safetensors";
  int block_size = 16;  // tokens per page of --kv-cache paged
};

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
  return v;
}

[[noreturn]] void fail(const std::string& m) {
  std::fprintf(stderr, "vpod bench model: %s\n", m.c_str());
  throw CLI::RuntimeError(1);
}

// A hybrid step as Sarathi builds it: one prefill chunk of `chunk` new tokens
// after `chunk_cached` cached ones, plus `decodes` decodes at context `decode_ctx`.
struct HybridSpec {
  int chunk = 0, chunk_cached = 0, decodes = 0, decode_ctx = 0;
  int max_context() const { return std::max(chunk_cached + chunk, decode_ctx); }
};

// Parses "C@X+D@Y[,C@X+D@Y...]" (e.g. "2048@8192+20@16384").
std::vector<HybridSpec> parse_hybrids(const std::string& text) {
  std::vector<HybridSpec> specs;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    HybridSpec h;
    char at1 = 0, plus = 0, at2 = 0;
    std::istringstream is(item);
    if (!(is >> h.chunk >> at1 >> h.chunk_cached >> plus >> h.decodes >> at2 >> h.decode_ctx) ||
        at1 != '@' || plus != '+' || at2 != '@' || h.chunk < 1 || h.chunk_cached < 0 ||
        h.decodes < 1 || h.decode_ctx < 1) {
      fail("--hybrids item '" + item + "' is not CHUNK@CACHED+DECODES@CONTEXT with positive sizes");
    }
    specs.push_back(h);
  }
  return specs;
}

template <typename T>
T ok_or_fail(Result<T> r) {
  if (!r.ok()) fail(r.status().to_string());
  return std::move(r).value();
}

// A KV cache in backend memory for the benchmark's steps: contiguous,
// per-layer layout [num_slots, max_ctx, kv_heads, head_dim], or paged, per
// layer [num_blocks, block_size, kv_heads, head_dim] pools with one block
// table for all layers (create_paged).
class BenchKv {
 public:
  // The rows' cache: contiguous (block_size 0) or paged.
  static BenchKv create_for(model::Backend& backend, const model::ModelConfig& c, DType dtype,
                            int num_slots, int max_ctx, int block_size) {
    return block_size > 0 ? create_paged(backend, c, dtype, num_slots, max_ctx, block_size)
                          : create(backend, c, dtype, num_slots, max_ctx);
  }

  static BenchKv create_paged(model::Backend& backend, const model::ModelConfig& c, DType dtype,
                              int num_slots, int max_ctx, int block_size) {
    BenchKv kv;
    const int per_slot = (max_ctx + block_size - 1) / block_size;
    const int num_blocks = num_slots * per_slot;
    const std::int64_t token_elems = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
    // The slots' blocks in a fixed shuffled order (a pool's steady state).
    std::vector<std::int32_t> table(static_cast<std::size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(1234));
    kv.buffers_.push_back(ok_or_fail(backend.allocate(table.size() * sizeof(std::int32_t))));
    if (cudaMemcpy(kv.buffers_.back()->data(), table.data(), table.size() * sizeof(std::int32_t),
                   cudaMemcpyHostToDevice) != cudaSuccess) {
      fail("block table upload failed");
    }
    const auto* device_table = static_cast<const std::int32_t*>(kv.buffers_.back()->data());
    const std::size_t bytes =
        static_cast<std::size_t>(num_blocks) * block_size * token_elems * dtype_size(dtype);
    for (int l = 0; l < c.num_layers; ++l) {
      PagedKvView view{.dtype = dtype,
                       .device = backend.device(),
                       .num_blocks = num_blocks,
                       .block_size = block_size,
                       .num_kv_heads = c.num_kv_heads,
                       .head_dim = c.head_dim,
                       .block_stride = token_elems * block_size,
                       .token_stride = token_elems,
                       .head_stride = c.head_dim,
                       .block_table = device_table,
                       .num_slots = num_slots,
                       .max_blocks_per_slot = per_slot};
      for (void** half : {&view.k, &view.v}) {
        kv.buffers_.push_back(ok_or_fail(backend.allocate(bytes)));
        *half = kv.buffers_.back()->data();
      }
      kv.paged_.push_back(view);
    }
    return kv;
  }

  static BenchKv create(model::Backend& backend, const model::ModelConfig& c, DType dtype,
                        int num_slots, int max_ctx) {
    BenchKv kv;
    const std::int64_t token_elems = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
    const std::size_t bytes =
        static_cast<std::size_t>(num_slots) * max_ctx * token_elems * dtype_size(dtype);
    for (int l = 0; l < c.num_layers; ++l) {
      KvLayerView view{.dtype = dtype,
                       .device = backend.device(),
                       .num_slots = num_slots,
                       .max_ctx = max_ctx,
                       .num_kv_heads = c.num_kv_heads,
                       .head_dim = c.head_dim,
                       .slot_stride = token_elems * max_ctx,
                       .token_stride = token_elems,
                       .head_stride = c.head_dim};
      for (void** half : {&view.k, &view.v}) {
        kv.buffers_.push_back(ok_or_fail(backend.allocate(bytes)));
        *half = kv.buffers_.back()->data();
      }
      kv.layers_.push_back(view);
    }
    return kv;
  }
  KvCacheView view() const { return {.contiguous = layers_, .paged = paged_}; }

  // Fills every layer's K and V with random values: a real cache holds data,
  // not what the allocator returned (often zeros); the tensor cores' power,
  // and with it the clock attention runs at next to the GEMMs, depends on it.
  void fill_random(bool bf16) const {
    for (const KvLayerView& v : layers_) {
      const std::size_t count = static_cast<std::size_t>(v.num_slots) * v.slot_stride;
      fill_random_device(v.k, count, 101, bf16, nullptr);
      fill_random_device(v.v, count, 202, bf16, nullptr);
    }
    for (const PagedKvView& v : paged_) {
      const std::size_t count = static_cast<std::size_t>(v.num_blocks) * v.block_stride;
      fill_random_device(v.k, count, 101, bf16, nullptr);
      fill_random_device(v.v, count, 202, bf16, nullptr);
    }
    if (cudaDeviceSynchronize() != cudaSuccess) fail("KV fill failed");
  }

 private:
  std::vector<std::unique_ptr<model::BackendBuffer>> buffers_;
  std::vector<KvLayerView> layers_;
  std::vector<PagedKvView> paged_;
};

struct StepTiming {
  double gpu_ms = 0;      // per step, median over `iters` steps (graphs when eligible)
  double enqueue_ms = 0;  // host time inside forward() per step
  double eager_ms = 0;    // the same steps with graphs off (decode rows)
  model::OpTimes ops;     // one extra, timed step (eager)
};

double median_step_ms(model::Model& m, const HybridBatch& batch, const KvCacheView& kv,
                      model::StepPlan& plan, int iters, double* enqueue_ms) {
  model::Backend& b = m.backend();
  // Three warm-ups: a decode shape runs eagerly once, is recorded the
  // second time, replayed from then on.
  for (int i = 0; i < 3; ++i) ok_or_fail(m.forward(batch, kv, plan));
  if (!b.synchronize().ok()) fail("synchronize failed");
  double enqueue = 0;
  std::vector<double> gpu;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ok_or_fail(m.forward(batch, kv, plan));
    const auto t1 = std::chrono::steady_clock::now();
    if (!b.synchronize().ok()) fail("synchronize failed");
    const auto t2 = std::chrono::steady_clock::now();
    enqueue += std::chrono::duration<double, std::milli>(t1 - t0).count();
    gpu.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
  }
  std::sort(gpu.begin(), gpu.end());
  if (enqueue_ms != nullptr) *enqueue_ms = enqueue / iters;
  return gpu[gpu.size() / 2];
}

StepTiming time_steps(model::Model& m, const HybridBatch& batch, const KvCacheView& kv,
                      model::StepPlan& plan, int iters) {
  model::Backend& b = m.backend();
  StepTiming t;
  if (batch.prefills.empty()) {
    m.set_step_graphs(false);
    t.eager_ms = median_step_ms(m, batch, kv, plan, iters, nullptr);
    m.set_step_graphs(true);
  }
  // Each step is timed on the host from the call to its completion (the
  // backend's stream is internal), the median kept; enqueue is the part the
  // host spends inside forward().
  t.gpu_ms = median_step_ms(m, batch, kv, plan, iters, &t.enqueue_ms);
  b.set_op_timing(true);
  ok_or_fail(m.forward(batch, kv, plan));
  t.ops = b.take_op_times();
  b.set_op_timing(false);
  return t;
}

// The decode GEMMs at M = 1 on the model's weight shapes: the GEMV kernel
// against cuBLASLt's heuristic choice, in TB/s of weight bytes read.
void bench_gemv(const model::Model& m, DType dtype, nlohmann::json& report) {
  const model::ModelConfig& c = m.config();
  struct Shape {
    const char* name;
    std::int64_t n, k;
  };
  const Shape shapes[] = {
      {"qkv", c.q_size() + 2 * static_cast<std::int64_t>(c.kv_size()), c.hidden_size},
      {"o", c.hidden_size, c.q_size()},
      {"gate_up", 2 * static_cast<std::int64_t>(c.intermediate_size), c.hidden_size},
      {"down", c.hidden_size, c.intermediate_size},
      {"lm_head", c.vocab_size, c.hidden_size}};
  auto lt = ok_or_fail(kernels::CublasLt::create());
  // A created stream: programmatic dependent launch needs one.
  const cuda::Stream owned_stream = ok_or_fail(cuda::Stream::create());
  cudaStream_t stream = owned_stream.get();
  constexpr int kIters = 50;
  auto start = ok_or_fail(cuda::Event::create(cuda::Event::Timing::enabled));
  auto stop = ok_or_fail(cuda::Event::create(cuda::Event::Timing::enabled));
  std::printf("\ndecode GEMM, M = 1 (TB/s of weights read; %d back-to-back launches)\n", kIters);
  std::printf("%-8s %-14s %10s %10s %10s %10s %10s %10s\n", "weight", "N x K", "gemv us",
              "gemv TB/s", "cublas us", "cublas TB/s", "norm us", "pdl us");
  nlohmann::json rows = nlohmann::json::array();
  for (const Shape& s : shapes) {
    const std::size_t w_bytes = static_cast<std::size_t>(s.n * s.k) * dtype_size(dtype);
    auto w = ok_or_fail(cuda::DeviceBuffer::allocate(w_bytes));
    auto x = ok_or_fail(cuda::DeviceBuffer::allocate(static_cast<std::size_t>(s.k) * 4));
    auto out = ok_or_fail(cuda::DeviceBuffer::allocate(static_cast<std::size_t>(s.n) * 4));
    cudaMemset(w.data(), 0x3c, w_bytes);
    cudaMemset(x.data(), 0x3c, static_cast<std::size_t>(s.k) * dtype_size(dtype));
    cudaDeviceSynchronize();  // the memsets ran on the legacy stream
    const TensorView xv(x.data(), dtype, {1, s.k}, Device::cuda);
    const TensorView wv(w.data(), dtype, {s.n, s.k}, Device::cuda);
    const DType out_dtype = std::string(s.name) == "lm_head" ? DType::f32 : dtype;
    const TensorView ov(out.data(), out_dtype, {1, s.n}, Device::cuda);
    auto time_us = [&](auto&& launch) {
      for (int i = 0; i < 3; ++i) launch();
      start.record(stream);
      for (int i = 0; i < kIters; ++i) launch();
      stop.record(stream);
      if (cudaStreamSynchronize(stream) != cudaSuccess) fail("GEMV bench failed");
      return cuda::Event::elapsed_ms(start, stop) * 1e3 / kIters;
    };
    double gemv_us = 0;
    if (kernels::gemv_supported(xv, wv, nullptr, ov)) {
      gemv_us = time_us([&] { kernels::gemv_gpu(xv, wv, nullptr, ov, stream); });
    }
    const double lt_us = time_us([&] {
      if (!lt->gemm(xv, wv, nullptr, ov, stream).ok()) fail("cuBLASLt GEMM failed");
    });
    // The fused form the decode step runs on this weight (norm prologue with
    // the residual add; SiLU*mul epilogue on gate_up; the logit rows'
    // final norm on lm_head), plain launches, and the plain GEMV with
    // programmatic dependent launch (back to back: each prefetches while the
    // previous one finishes).
    const std::string name = s.name;
    const bool silu = name == "gate_up";
    const bool fused_in_step = name == "qkv" || silu || name == "lm_head";
    auto res = ok_or_fail(cuda::DeviceBuffer::allocate(static_cast<std::size_t>(s.k) * 2 * 3));
    cudaMemset(res.data(), 0x3c, static_cast<std::size_t>(s.k) * 2 * 3);
    cudaDeviceSynchronize();  // the memsets ran on the legacy stream
    auto* res_base = static_cast<std::uint8_t*>(res.data());
    kernels::GemvNormInput in;
    in.residual = TensorView(res_base, dtype, {1, s.k}, Device::cuda);
    in.delta = TensorView(res_base + s.k * 2, dtype, {1, s.k}, Device::cuda);
    in.weight = TensorView(x.data(), dtype, {s.k}, Device::cuda);
    in.eps = 1e-5f;
    in.residual_out = TensorView(res_base + s.k * 4, dtype, {1, s.k}, Device::cuda);
    in.num_rows = 1;
    const TensorView nov(out.data(), out_dtype, {1, silu ? s.n / 2 : s.n}, Device::cuda);
    double norm_us = 0, pdl_us = 0;
    if (fused_in_step && kernels::gemv_norm_supported(in, wv, nullptr, nov, silu)) {
      norm_us = time_us([&] { kernels::gemv_norm_gpu(in, wv, nullptr, nov, silu, stream); });
    }
    if (kernels::gemv_supported(xv, wv, nullptr, ov)) {
      pdl_us = time_us([&] { kernels::gemv_gpu(xv, wv, nullptr, ov, stream, {.pdl = true}); });
    }
    const double gb = static_cast<double>(w_bytes) / 1e3;  // bytes / us -> per 1e-6 s
    std::printf("%-8s %6lld x %-6lld %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", s.name,
                static_cast<long long>(s.n), static_cast<long long>(s.k), gemv_us,
                gemv_us > 0 ? gb / gemv_us / 1e3 : 0.0, lt_us, gb / lt_us / 1e3, norm_us, pdl_us);
    rows.push_back({{"weight", s.name},
                    {"n", s.n},
                    {"k", s.k},
                    {"gemv_us", gemv_us},
                    {"norm_gemv_us", norm_us},
                    {"pdl_gemv_us", pdl_us},
                    {"cublaslt_us", lt_us},
                    {"gemv_tb_s", gemv_us > 0 ? gb / gemv_us / 1e3 : 0.0},
                    {"cublaslt_tb_s", gb / lt_us / 1e3}});
  }
  report["gemv"] = rows;
}

// The sampler on one decode step's logits: greedy and filtered random
// sampling at a few batch sizes (host time per call, results on the host).
void bench_sampling(model::Model& m, model::StepPlan& plan, nlohmann::json& report) {
  model::Backend& b = m.backend();
  const model::ModelConfig& c = m.config();
  const int max_batch = std::min(64, m.options().max_num_sequences);
  auto kv = BenchKv::create(b, c, m.kv_dtype(), max_batch, 64);
  std::printf("\nsampling (%d-token vocabulary, host time per call incl. results)\n", c.vocab_size);
  std::printf("%-6s %-26s %10s\n", "batch", "config", "ms");
  nlohmann::json rows = nlohmann::json::array();
  for (int batch : {1, max_batch}) {
    HybridBatch hb;
    for (int i = 0; i < batch; ++i) {
      hb.decodes.push_back({.slot = i, .cached_len = 31, .num_new = 1, .token_offset = i});
      hb.token_ids.push_back((13 * i + 1) % c.vocab_size);
      hb.positions.push_back(31);
    }
    const TensorView logits = ok_or_fail(m.forward(hb, kv.view(), plan));
    struct Named {
      const char* name;
      kernels::SamplingConfig config;
    };
    kernels::SamplingConfig greedy;
    greedy.temperature = 0.0f;
    kernels::SamplingConfig topk;
    topk.top_k = 50;
    topk.temperature = 0.8f;
    kernels::SamplingConfig topp;
    topp.top_p = 0.9f;
    topp.min_p = 0.05f;
    topp.num_top_logprobs = 5;
    for (const Named& n : {Named{"greedy", greedy}, Named{"top_k 50, T 0.8", topk},
                           Named{"top_p 0.9, min_p, 5 logprobs", topp}}) {
      std::vector<kernels::SampleRequest> req(static_cast<std::size_t>(batch));
      std::vector<kernels::SampleResult> res(static_cast<std::size_t>(batch));
      for (int i = 0; i < batch; ++i) {
        req[i].row = i;
        req[i].config = n.config;
        req[i].config.seed = static_cast<std::uint64_t>(i);
      }
      std::vector<double> ms;
      for (int it = 0; it < 7; ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        if (Status s = b.sample(logits, req, res); !s.ok()) fail(s.to_string());
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%-6d %-26s %10.3f\n", batch, n.name, ms[ms.size() / 2]);
      rows.push_back({{"batch", batch}, {"config", n.name}, {"ms", ms[ms.size() / 2]}});
    }
  }
  report["sampling"] = rows;
}

// Decode steps at context 1024 under each decode tuning (fusions, PDL
// launches; model/backend.h DecodeTuning), graphs and eager; the backend is
// left with the tuning of the command line.
void bench_tuning(model::Model& m, model::StepPlan& plan, const ModelBenchArgs& a,
                  double weights_read, nlohmann::json& report) {
  model::Backend& b = m.backend();
  const model::ModelConfig& c = m.config();
  const model::DecodeTuning chosen = b.decode_tuning();
  struct Variant {
    const char* name;
    model::DecodeTuning tuning;
  };
  const Variant variants[] = {
      {"unfused", {.fuse = false}},
      {"fused", {.fuse = true}},
      {"fused-body", {.fuse = true, .fuse_logits = false}},
      {"fused-body+pdl", {.fuse = true, .fuse_logits = false, .pdl = true}},
      {"fused+pdl", {.fuse = true, .pdl = true}},
      {"unfused+pdl", {.fuse = false, .pdl = true}},
      {"cublaslt-m>1", {.fuse = false, .gemv_max_rows = 1}},
  };
  constexpr int kContext = 1024;
  std::printf("\ndecode tuning, context %d (graph step ms / eager ms)\n", kContext);
  std::printf("%-6s %-18s %10s %10s %9s %9s\n", "batch", "tuning", "step ms", "eager ms", "ratio",
              "enqueue");
  nlohmann::json rows = nlohmann::json::array();
  for (int batch : parse_list(a.tuning_batches)) {
    if (batch > m.options().max_num_sequences || batch > m.options().max_num_tokens) continue;
    auto kv = BenchKv::create(b, c, m.kv_dtype(), batch, kContext);
    HybridBatch hb;
    for (int i = 0; i < batch; ++i) {
      hb.decodes.push_back(
          {.slot = i, .cached_len = kContext - 1, .num_new = 1, .token_offset = i});
      hb.token_ids.push_back((17 * i + 3) % c.vocab_size);
      hb.positions.push_back(kContext - 1);
    }
    const double kv_bytes = static_cast<double>(batch) * kContext * m.kv_bytes_per_token();
    const double roof_ms = (weights_read + kv_bytes) / kBandwidthCeiling * 1e3;
    for (const Variant& v : variants) {
      if (batch == 1 && v.tuning.gemv_max_rows == 1) continue;  // same as unfused
      b.set_decode_tuning(v.tuning);
      m.set_step_graphs(false);
      const double eager = median_step_ms(m, hb, kv.view(), plan, a.iters, nullptr);
      m.set_step_graphs(true);
      double enqueue = 0;
      const double step = median_step_ms(m, hb, kv.view(), plan, a.iters, &enqueue);
      std::printf("%-6d %-18s %10.3f %10.3f %8.2fx %9.3f\n", batch, v.name, step, eager,
                  step / roof_ms, enqueue);
      rows.push_back({{"batch", batch},
                      {"context", kContext},
                      {"tuning", v.name},
                      {"step_ms", step},
                      {"eager_step_ms", eager},
                      {"roofline_ms", roof_ms},
                      {"ratio_to_roofline", step / roof_ms},
                      {"enqueue_ms", enqueue}});
    }
  }
  b.set_decode_tuning(chosen);
  report["decode_tuning"] = rows;
  report["decode_tuning_chosen"] = {
      {"fuse", chosen.fuse}, {"pdl", chosen.pdl}, {"pdl_early_trigger", chosen.pdl_early_trigger}};
}

void run(const ModelBenchArgs& a) {
  const auto choice = ok_or_fail(cuda::choose_backend("cuda"));
  (void)choice;
  const auto gpus = ok_or_fail(cuda::query_gpus());
  const std::vector<int> batches = parse_list(a.batches);
  const std::vector<int> contexts = parse_list(a.contexts);
  const std::vector<int> prefills = parse_list(a.prefills);
  const std::vector<HybridSpec> hybrids = parse_hybrids(a.hybrids);
  int max_tokens = 17;  // the validation step's 16 + 1 tokens
  for (int b : batches) max_tokens = std::max(max_tokens, b);
  for (int p : prefills) max_tokens = std::max(max_tokens, p);
  int max_seqs = 2;  // the validation step's prefill + decode
  for (int b : batches) max_seqs = std::max(max_seqs, b);
  for (const HybridSpec& h : hybrids) {
    max_tokens = std::max(max_tokens, h.chunk + h.decodes);
    max_seqs = std::max(max_seqs, 1 + h.decodes);
  }
  for (int b : parse_list(a.tuning_batches)) {
    max_seqs = std::max(max_seqs, b);
    max_tokens = std::max(max_tokens, b);
  }

  model::CudaBackendOptions bo;
  bo.dtype = ok_or_fail(parse_dtype(a.dtype));
  engine::apply_attention_choice(ok_or_fail(engine::parse_attention_choice(a.attention)), bo);
  bo.gemv = !a.no_gemv;
  bo.decode = {.fuse = a.fuse,
               .fuse_logits = !a.no_fuse_logits,
               .pdl = a.pdl || a.pdl_early,
               .pdl_early_trigger = a.pdl_early,
               .gemv_max_rows = a.gemv_max_rows};
  bo.kernels = a.kernels;
  auto backend = ok_or_fail(model::make_cuda_backend(bo));
  const auto load_start = std::chrono::steady_clock::now();
  auto m = ok_or_fail(
      model::Model::load(a.model, *backend,
                         {.max_num_tokens = max_tokens,
                          .max_num_sequences = max_seqs,
                          .load_format = ok_or_fail(model::parse_load_format(a.load_format))}));
  // The steps' attention plan, reused by every step of the run.
  model::StepPlan step_plan;
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const model::ModelConfig& c = m->config();
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const auto plan = ok_or_fail(model::plan_gpu_memory(total_b, free_b, a.gpu_memory_utilization,
                                                      m->weight_bytes(), m->activation_bytes(),
                                                      m->kv_bytes_per_token()));
  std::printf("model: %s %d layers, hidden %d, %.2f GB weights (%s), loaded in %.1f s on %s\n",
              std::string(model::architecture_name(c.arch)).c_str(), c.num_layers, c.hidden_size,
              static_cast<double>(m->weight_bytes()) / 1e9, dtype_name(bo.dtype).data(), load_s,
              gpus[0].name.c_str());
  std::printf("%s\n", plan.to_string().c_str());

  // Bytes a decode step must read: every weight but the embedding table
  // (only the batch's rows are gathered), plus the KV cache.
  const std::size_t elem = dtype_size(bo.dtype);
  const double embed_bytes = static_cast<double>(c.vocab_size) * c.hidden_size * elem;
  const double weights_read =
      static_cast<double>(m->weight_bytes()) - (c.tie_word_embeddings ? 0.0 : embed_bytes);

  nlohmann::json report;
  report["model"] = a.model;
  report["gpu"] = gpus[0].name;
  report["dtype"] = std::string(dtype_name(bo.dtype));
  report["attention"] = a.attention;
  // The decode, prefill and hybrid rows' cache (0: contiguous).
  const int paged_block = a.kv_cache == "paged" ? a.block_size : 0;
  report["kv_cache"] = a.kv_cache;
  if (paged_block > 0) report["block_size"] = paged_block;
  report["weight_bytes"] = m->weight_bytes();
  report["memory_plan"] = plan.to_string();

  // Validation: a small decode batch gives finite, non-constant logits.
  {
    auto kv = BenchKv::create(*backend, c, m->kv_dtype(), 2, 64);
    HybridBatch b;
    b.prefills.push_back({.slot = 0, .cached_len = 0, .num_new = 16, .token_offset = 0});
    for (int i = 0; i < 16; ++i) {
      b.token_ids.push_back(1000 + 37 * i);
      b.positions.push_back(i);
    }
    b.decodes.push_back({.slot = 1, .cached_len = 20, .num_new = 1, .token_offset = 16});
    b.token_ids.push_back(5);
    b.positions.push_back(20);
    const TensorView logits = ok_or_fail(m->forward(b, kv.view(), step_plan));
    std::vector<float> host(static_cast<std::size_t>(logits.numel()));
    if (!backend->download(logits.data(), host.size() * 4, host.data()).ok()) fail("download");
    float lo = INFINITY, hi = -INFINITY;
    for (float v : host) {
      if (!std::isfinite(v)) fail("validation: non-finite logit");
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (!(hi > lo)) fail("validation: constant logits");
    std::printf("validation: logits finite, range [%.3f, %.3f]\n", lo, hi);
  }

  bench_gemv(*m, bo.dtype, report);

  bench_tuning(*m, step_plan, a, weights_read, report);

  std::printf("\n%-6s %-7s %10s %10s %9s %8s %9s | %8s %8s %8s %9s\n", "batch", "context",
              "step ms", "roofline", "ratio", "TB/s", "eager ms", "gemm", "attn", "other",
              "enqueue");
  nlohmann::json decode_rows = nlohmann::json::array();
  for (int batch : batches) {
    for (int ctx : contexts) {
      const double kv_bytes = static_cast<double>(batch) * ctx * m->kv_bytes_per_token();
      std::size_t free_now = 0, total_now = 0;
      cudaMemGetInfo(&free_now, &total_now);
      if (kv_bytes > 0.95 * static_cast<double>(free_now)) {
        std::printf("%-6d %-7d   skipped: KV %.1f GB > free %.1f GB\n", batch, ctx, kv_bytes / 1e9,
                    static_cast<double>(free_now) / 1e9);
        decode_rows.push_back({{"batch", batch}, {"context", ctx}, {"skipped", "KV does not fit"}});
        continue;
      }
      auto kv = BenchKv::create_for(*backend, c, m->kv_dtype(), batch, ctx, paged_block);
      HybridBatch b;
      for (int i = 0; i < batch; ++i) {
        b.decodes.push_back({.slot = i, .cached_len = ctx - 1, .num_new = 1, .token_offset = i});
        b.token_ids.push_back((17 * i + 3) % c.vocab_size);
        b.positions.push_back(ctx - 1);
      }
      const StepTiming t = time_steps(*m, b, kv.view(), step_plan, a.iters);
      const double roof_ms = (weights_read + kv_bytes) / kBandwidthCeiling * 1e3;
      const double tbs = (weights_read + kv_bytes) / (t.gpu_ms * 1e-3) / 1e12;
      std::printf("%-6d %-7d %10.3f %10.3f %8.2fx %8.2f %9.3f | %8.3f %8.3f %8.3f %9.3f\n", batch,
                  ctx, t.gpu_ms, roof_ms, t.gpu_ms / roof_ms, tbs, t.eager_ms, t.ops.gemm_ms,
                  t.ops.attention_ms, t.ops.other_ms, t.enqueue_ms);
      decode_rows.push_back({{"batch", batch},
                             {"context", ctx},
                             {"step_ms", t.gpu_ms},
                             {"roofline_ms", roof_ms},
                             {"ratio_to_roofline", t.gpu_ms / roof_ms},
                             {"achieved_tb_s", tbs},
                             {"eager_step_ms", t.eager_ms},
                             {"gemm_ms", t.ops.gemm_ms},
                             {"attention_ms", t.ops.attention_ms},
                             {"other_ms", t.ops.other_ms},
                             {"enqueue_ms", t.enqueue_ms}});
    }
  }
  report["decode"] = decode_rows;
  const model::StepGraphStats gs = backend->step_graph_stats();
  std::printf("step graphs: %d recorded, %d steps replayed, %d cached\n", gs.captured, gs.launched,
              gs.cached);
  report["step_graphs"] = {{"recorded", gs.captured}, {"launched", gs.launched}};
  bench_sampling(*m, step_plan, report);

  std::printf("\n%-8s %10s %10s %10s %8s | %8s %8s %8s\n", "prefill", "ms", "TFLOP/s", "roofline",
              "of roof", "gemm", "attn", "other");
  nlohmann::json prefill_rows = nlohmann::json::array();
  const double linear_params =
      static_cast<double>(c.num_layers) *
      (static_cast<double>(c.hidden_size) * (c.q_size() + 2 * c.kv_size()) +
       static_cast<double>(c.q_size()) * c.hidden_size + 3.0 * c.hidden_size * c.intermediate_size);
  for (int n : prefills) {
    auto kv = BenchKv::create_for(*backend, c, m->kv_dtype(), 1, n, paged_block);
    HybridBatch b;
    b.prefills.push_back({.slot = 0, .cached_len = 0, .num_new = n, .token_offset = 0});
    for (int i = 0; i < n; ++i) {
      b.token_ids.push_back((31 * i + 7) % c.vocab_size);
      b.positions.push_back(i);
    }
    const StepTiming t = time_steps(*m, b, kv.view(), step_plan, std::max(3, a.iters / 3));
    // Causal attention: QK^T and PV over n(n+1)/2 pairs per head.
    const double attn_flops =
        4.0 * c.num_layers * c.num_q_heads * c.head_dim * (static_cast<double>(n) * (n + 1) / 2.0);
    const double flops = 2.0 * n * linear_params + attn_flops +
                         2.0 * static_cast<double>(c.vocab_size) * c.hidden_size;
    const double roof_ms = flops / kFlopCeiling * 1e3;
    const double tflops = flops / (t.gpu_ms * 1e-3) / 1e12;
    std::printf("%-8d %10.2f %10.1f %10.2f %7.1f%% | %8.2f %8.2f %8.2f\n", n, t.gpu_ms, tflops,
                roof_ms, 100.0 * roof_ms / t.gpu_ms, t.ops.gemm_ms, t.ops.attention_ms,
                t.ops.other_ms);
    prefill_rows.push_back({{"tokens", n},
                            {"ms", t.gpu_ms},
                            {"tflops", tflops},
                            {"roofline_ms", roof_ms},
                            {"fraction_of_roofline", roof_ms / t.gpu_ms},
                            {"tokens_per_s", n / (t.gpu_ms * 1e-3)},
                            {"gemm_ms", t.ops.gemm_ms},
                            {"attention_ms", t.ops.attention_ms},
                            {"other_ms", t.ops.other_ms},
                            {"enqueue_ms", t.enqueue_ms}});
  }
  report["prefill"] = prefill_rows;

  // Hybrid steps (chunked prefill + decodes): where POD's fused kernel and
  // the serial kernels differ; run once per --attention mode to compare.
  if (!hybrids.empty()) {
    std::printf("\n%-24s %10s | %8s %8s %8s  (attention %s, kv-cache %s)\n", "hybrid step", "ms",
                "gemm", "attn", "other", a.attention.c_str(), a.kv_cache.c_str());
  }
  nlohmann::json hybrid_rows = nlohmann::json::array();
  for (const HybridSpec& h : hybrids) {
    auto kv = BenchKv::create_for(*backend, c, m->kv_dtype(), 1 + h.decodes, h.max_context(),
                                  paged_block);
    kv.fill_random(m->kv_dtype() == DType::bf16);
    HybridBatch b;
    b.prefills.push_back(
        {.slot = 0, .cached_len = h.chunk_cached, .num_new = h.chunk, .token_offset = 0});
    for (int i = 0; i < h.chunk; ++i) {
      b.token_ids.push_back((31 * i + 7) % c.vocab_size);
      b.positions.push_back(h.chunk_cached + i);
    }
    for (int i = 0; i < h.decodes; ++i) {
      b.decodes.push_back({.slot = 1 + i,
                           .cached_len = h.decode_ctx - 1,
                           .num_new = 1,
                           .token_offset = h.chunk + i});
      b.token_ids.push_back((17 * i + 3) % c.vocab_size);
      b.positions.push_back(h.decode_ctx - 1);
    }
    const StepTiming t = time_steps(*m, b, kv.view(), step_plan, std::max(3, a.iters / 2));
    const std::string name =
        fmt::format("{}@{}+{}@{}", h.chunk, h.chunk_cached, h.decodes, h.decode_ctx);
    std::printf("%-24s %10.3f | %8.3f %8.3f %8.3f\n", name.c_str(), t.gpu_ms, t.ops.gemm_ms,
                t.ops.attention_ms, t.ops.other_ms);
    hybrid_rows.push_back({{"step", name},
                           {"chunk", h.chunk},
                           {"chunk_cached", h.chunk_cached},
                           {"decodes", h.decodes},
                           {"decode_context", h.decode_ctx},
                           {"ms", t.gpu_ms},
                           {"gemm_ms", t.ops.gemm_ms},
                           {"attention_ms", t.ops.attention_ms},
                           {"other_ms", t.ops.other_ms},
                           {"enqueue_ms", t.enqueue_ms}});
  }
  report["hybrid"] = hybrid_rows;
  if (!a.json.empty()) {
    std::ofstream out(a.json);
    out << report.dump(1) << "\n";
    if (!out) fail("cannot write " + a.json);
  }
}

}  // namespace

void add_model_bench(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("model", "Model runtime: decode steps and prefill vs rooflines");
  auto a = std::make_shared<ModelBenchArgs>();
  cmd->add_option("--model", a->model, "Model folder (e.g. vpod make-model --preset llama3-8b)")
      ->required();
  cmd->add_option("--batches", a->batches, "Decode batch sizes")->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "Decode context lengths")->capture_default_str();
  cmd->add_option("--prefills", a->prefills, "Prefill prompt lengths")->capture_default_str();
  cmd->add_option("--hybrids", a->hybrids,
                  "Hybrid steps CHUNK@CACHED+DECODES@CONTEXT, comma-separated "
                  "(e.g. 2048@8192+20@16384)");
  cmd->add_option("--iters", a->iters, "Timed steps per point")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "bf16 or fp16")->capture_default_str();
  cmd->add_option("--attention", a->attention, "serial, pod, or simple (the exact kernel)")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "Fraction of GPU memory vpod may use")
      ->capture_default_str();
  cmd->add_flag("--no-gemv", a->no_gemv, "Decode GEMMs through cuBLASLt only (no GEMV kernel)");
  cmd->add_flag("--fuse", a->fuse,
                "Decode steps with RMSNorm and SiLU*mul fused into the GEMV kernels");
  cmd->add_flag("--no-fuse-logits", a->no_fuse_logits,
                "With --fuse: the final norm and row gather as separate kernels");
  cmd->add_option("--gemv-max-rows", a->gemv_max_rows,
                  "GEMMs of at most this many rows (1-4) use the GEMV kernel")
      ->capture_default_str();
  cmd->add_flag("--pdl", a->pdl, "Programmatic dependent launch of the GEMV and RoPE kernels");
  cmd->add_flag("--pdl-early", a->pdl_early,
                "With --pdl: let the next kernel launch as soon as this one has started");
  cmd->add_option("--tuning-batches", a->tuning_batches,
                  "Batch sizes of the decode-tuning comparison (empty: none)")
      ->capture_default_str();
  add_kernel_option_flags(*cmd, a->kernels);
  cmd->add_option("--kv-cache", a->kv_cache,
                  "The decode, prefill and hybrid rows' KV cache: vattn (contiguous) or paged "
                  "(FlashInfer's kernels, shuffled pages)")
      ->check(CLI::IsMember({"vattn", "paged"}))
      ->capture_default_str();
  cmd->add_option("--block-size", a->block_size, "Tokens per page of --kv-cache paged")
      ->check(CLI::IsMember({1, 16, 32, 64}))
      ->capture_default_str();
  cmd->add_option("--load-format", a->load_format,
                  "safetensors, or dummy (random weights made on the GPU: the model folder "
                  "needs no weight files)")
      ->capture_default_str();
  cmd->add_option("--json", a->json, "Write the results as JSON");
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::bench
