// GPU tests of the attention kernels against the CPU reference: fresh random
// inputs every run, outputs poisoned with NaN, caches poisoned with NaN where
// no token lives, odd lengths (1, 17, 255, 4095, 16385), GQA groups 1/4/7/8
// (and 20, two head chunks), both vAttention layouts, fp16 and bf16,
// head_dim 64 and 128. Tolerance: at most twice the error of a naive
// same-precision implementation against fp64, plus FlashAttention-3's small
// atol. Property checks: chunked prefill == one-shot prefill, decode ==
// one-token prefill, graph replay == launch.
// Paged layouts (block sizes 1, 16, 64, 256) run the paged baseline,
// FlashInfer's kernels (kernels/attention/flashinfer: FA3 prefill on sm_90a,
// FA2 elsewhere, the tensor-core decode), through the same checks
// (FlashInferPaged* below); vpod's own KV append writes their pages.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>

#include "cuda/device_buffer.h"
#include "cuda/graph.h"
#include "cuda/stream.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_kernels.h"
#include "kernels/attention/attention_reference.h"
#include "kernels/attention/flashinfer/paged_plan.h"
#include "kernels/attention/kv_tensor_map.h"
#include "kernels/attention_test_util.h"
#include "support/gpu.h"

namespace vpod::attention {
namespace {

using testing::HostKvCache;
using testing::KvLayout;
using testing::make_batch;
using testing::SeqSpec;

std::mt19937_64 fresh_rng() {
  const std::uint64_t seed = std::random_device{}();
  std::printf("[attention] seed %llu\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

int num_sms() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

int compute_major() {
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  return major;
}

float to_float(DType dtype, std::uint16_t bits) {
  return dtype == DType::bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
}

float round_to(DType dtype, float x) { return to_float(dtype, testing::to_bits(dtype, x)); }

int max_context(const HybridBatch& b) {
  int m = 1;
  for (const auto* l : {&b.prefills, &b.decodes}) {
    for (const auto& s : *l) m = std::max(m, s.context_len());
  }
  return m;
}

int num_seqs(const HybridBatch& b) {
  return static_cast<int>(b.prefills.size() + b.decodes.size());
}

// Rows to compare: every decode and every row of short chunks; for long
// chunks the first and last rows, the rows around each 128-row tile edge,
// and a few random ones.
std::vector<int> rows_to_check(const HybridBatch& batch, std::mt19937_64& rng) {
  constexpr int kAllRowsUpTo = 300;
  std::vector<int> rows;
  for (const BatchSequence& s : batch.prefills) {
    if (s.num_new <= kAllRowsUpTo) {
      for (int i = 0; i < s.num_new; ++i) rows.push_back(s.token_offset + i);
      continue;
    }
    std::set<int> pick = {0, 1, 2, s.num_new - 3, s.num_new - 2, s.num_new - 1};
    for (int edge = kPrefillBlockM; edge < s.num_new && pick.size() < 24;
         edge += 7 * kPrefillBlockM) {
      pick.insert(edge - 1);
      pick.insert(edge);
    }
    std::uniform_int_distribution<int> any(0, s.num_new - 1);
    while (pick.size() < 40) pick.insert(any(rng));
    for (int i : pick) rows.push_back(s.token_offset + i);
  }
  for (const BatchSequence& s : batch.decodes) rows.push_back(s.token_offset);
  return rows;
}

// The host side of one test: the cache mirror and one step's inputs.
struct StepInputs {
  std::vector<std::uint16_t> q, k_new, v_new;
};

StepInputs random_inputs(const AttentionDims& dims, int tokens, std::mt19937_64& rng) {
  StepInputs in;
  in.q = testing::random_values(static_cast<std::size_t>(tokens) * dims.num_q_heads * dims.head_dim,
                                dims.dtype, rng);
  in.k_new = testing::random_values(
      static_cast<std::size_t>(tokens) * dims.num_kv_heads * dims.head_dim, dims.dtype, rng);
  in.v_new = testing::random_values(
      static_cast<std::size_t>(tokens) * dims.num_kv_heads * dims.head_dim, dims.dtype, rng);
  return in;
}

// A device copy of a host cache plus the buffers one step needs.
class GpuAttention {
 public:
  // `paged_mode`: how a paged cache's FlashInfer plan runs hybrid steps.
  explicit GpuAttention(HostKvCache& host, fi::PagedMode paged_mode = fi::PagedMode::serial)
      : host_(host), paged_mode_(paged_mode) {
    stream_ = cuda::Stream::create().value();
    k_ = cuda::DeviceBuffer::allocate(host.k.size() * 2).value();
    v_ = cuda::DeviceBuffer::allocate(host.v.size() * 2).value();
    k_.copy_from_host(host.k.data(), host.k.size() * 2);
    v_.copy_from_host(host.v.data(), host.v.size() * 2);
    if (testing::is_paged(host.layout)) {
      table_ = cuda::DeviceBuffer::allocate(host.block_table.size() * 4).value();
      table_.copy_from_host(host.block_table.data(), host.block_table.size() * 4);
    }
    // copy_from_host runs on the legacy stream and may return before a
    // pageable copy's DMA lands; stream_ is non-blocking, so wait here.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  // append_kv, prefill, decode for one step (optionally captured in a CUDA
  // graph and replayed); mirrors the append on the host. Returns out's bits.
  // A paged cache runs FlashInfer's kernels, planned in FlashInfer's
  // CUDA-graph mode when `flashinfer_graph_mode` (default: when replayed).
  std::vector<std::uint16_t> step(const HybridBatch& batch, const StepInputs& in,
                                  const PlanOptions& options, float scale, bool use_graph = false,
                                  std::optional<bool> flashinfer_graph_mode = std::nullopt) {
    const AttentionDims& dims = host_.dims;
    const int tokens = batch.num_tokens();
    auto plan_or = AttentionPlan::create(batch, dims, options);
    EXPECT_TRUE(plan_or.ok()) << plan_or.status().to_string();
    const AttentionPlan& plan = *plan_or;
    cuda::DeviceBuffer metadata = cuda::DeviceBuffer::allocate(plan.metadata_bytes()).value();
    cuda::DeviceBuffer workspace = cuda::DeviceBuffer::allocate(plan.workspace_bytes()).value();
    const AttentionBuffers buffers{metadata.data(), metadata.bytes(), workspace.data(),
                                   workspace.bytes()};
    cuda::DeviceBuffer q = upload(in.q), k_new = upload(in.k_new), v_new = upload(in.v_new);
    cuda::DeviceBuffer out = cuda::DeviceBuffer::allocate(in.q.size() * 2).value();
    out.fill_bytes(0xff, stream_.get());  // NaN in fp16 and bf16
    workspace.fill_bytes(0xff, stream_.get());
    EXPECT_TRUE(plan.upload(buffers, stream_.get()).ok());

    const TensorView q_view(q.data(), dims.dtype, {tokens, dims.num_q_heads, dims.head_dim},
                            Device::cuda);
    const TensorView out_view(out.data(), dims.dtype, {tokens, dims.num_q_heads, dims.head_dim},
                              Device::cuda);
    const TensorView k_view(k_new.data(), dims.dtype, {tokens, dims.num_kv_heads, dims.head_dim},
                            Device::cuda);
    const TensorView v_view(v_new.data(), dims.dtype, {tokens, dims.num_kv_heads, dims.head_dim},
                            Device::cuda);
    const PagedKvView paged_kv =
        testing::is_paged(host_.layout)
            ? host_.paged_view(k_.data(), v_.data(), table_.as<const std::int32_t>(), Device::cuda)
            : PagedKvView{};
    fi::PagedPlan paged_plan;
    if (testing::is_paged(host_.layout)) {
      const Result<bool> built =
          paged_plan.build(batch, dims, paged_kv, flashinfer_graph_mode.value_or(use_graph),
                           stream_.get(), paged_mode_);
      EXPECT_TRUE(built.ok()) << built.status().to_string();
      fused_ = paged_plan.fused();
    }
    auto launch_all = [&] {
      if (testing::is_paged(host_.layout)) {
        EXPECT_TRUE(append_kv(plan, buffers, k_view, v_view, paged_kv, stream_.get()).ok());
        const Status r = paged_plan.run(q_view, paged_kv, out_view, scale, stream_.get());
        EXPECT_TRUE(r.ok()) << r.to_string();
      } else {
        const KvLayerView kv = host_.view(k_.data(), v_.data(), Device::cuda);
        EXPECT_TRUE(append_kv(plan, buffers, k_view, v_view, kv, stream_.get()).ok());
        EXPECT_TRUE(prefill(plan, buffers, q_view, kv, out_view, scale, stream_.get()).ok());
        EXPECT_TRUE(decode(plan, buffers, q_view, kv, out_view, scale, stream_.get()).ok());
      }
    };
    // Every step runs twice with `out` poisoned again in between (appends are
    // idempotent): the second run must write every row, so the decode split
    // counters must have reset themselves.
    if (use_graph) {
      auto capture = cuda::GraphCapture::begin(stream_.get()).value();
      launch_all();
      cuda::GraphExec exec = capture.finish().value();
      exec.launch(stream_.get());
      out.fill_bytes(0xff, stream_.get());
      exec.launch(stream_.get());  // replays are idempotent: same appends, same outputs
    } else {
      launch_all();
      out.fill_bytes(0xff, stream_.get());
      launch_all();
    }
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::uint16_t> result(in.q.size());
    out.copy_to_host(result.data(), result.size() * 2);

    // The host mirror gets the same append; the device cache must match it bit for bit.
    HostKvCache& h = host_;
    const TensorView hk(const_cast<std::uint16_t*>(in.k_new.data()), dims.dtype,
                        {tokens, dims.num_kv_heads, dims.head_dim});
    const TensorView hv(const_cast<std::uint16_t*>(in.v_new.data()), dims.dtype,
                        {tokens, dims.num_kv_heads, dims.head_dim});
    const Status appended =
        testing::is_paged(h.layout)
            ? reference_append_kv(
                  batch, dims, hk, hv,
                  h.paged_view(h.k.data(), h.v.data(), h.block_table.data(), Device::cpu))
            : reference_append_kv(batch, dims, hk, hv, h.view(h.k.data(), h.v.data(), Device::cpu));
    EXPECT_TRUE(appended.ok()) << appended.to_string();
    std::vector<std::uint16_t> k_back(h.k.size()), v_back(h.v.size());
    k_.copy_to_host(k_back.data(), k_back.size() * 2);
    v_.copy_to_host(v_back.data(), v_back.size() * 2);
    EXPECT_TRUE(k_back == h.k && v_back == h.v) << "append_kv differs from the reference append";
    return result;
  }

  // Whether the last step ran FlashInfer's POD kernel.
  bool fused() const { return fused_; }

 private:
  cuda::DeviceBuffer upload(const std::vector<std::uint16_t>& host) {
    cuda::DeviceBuffer b =
        cuda::DeviceBuffer::allocate(std::max<std::size_t>(host.size() * 2, 16)).value();
    b.copy_from_host(host.data(), host.size() * 2);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // see the constructor
    return b;
  }

  HostKvCache& host_;
  fi::PagedMode paged_mode_;
  bool fused_ = false;
  cuda::Stream stream_;
  cuda::DeviceBuffer k_, v_, table_;
};

struct Comparison {
  double max_err = 0;    // kernel vs fp64
  double naive_err = 0;  // naive same-precision vs fp64
  double atol = 0;
  double bound() const { return 2 * naive_err + atol; }
};

// Compares `out` (kernel bits) with the fp64 reference on the checked rows,
// after checking that every output element is finite (nothing left poisoned).
Comparison compare_with_reference(const HostKvCache& cache, const HybridBatch& batch,
                                  const StepInputs& in, const std::vector<std::uint16_t>& out,
                                  float scale, const std::vector<int>& rows, const char* label) {
  const AttentionDims& dims = cache.dims;
  const int tokens = batch.num_tokens();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(to_float(dims.dtype, out[i]))) {
      ADD_FAILURE() << label << ": output element " << i << " is not finite (row "
                    << i / (dims.num_q_heads * dims.head_dim) << ")";
      return {};
    }
  }
  const std::size_t n = static_cast<std::size_t>(tokens) * dims.num_q_heads * dims.head_dim;
  std::vector<float> exact(n), naive(n);
  const TensorView q(const_cast<std::uint16_t*>(in.q.data()), dims.dtype,
                     {tokens, dims.num_q_heads, dims.head_dim});
  const TensorView exact_view(exact.data(), DType::f32, {tokens, dims.num_q_heads, dims.head_dim});
  const TensorView naive_view(naive.data(), DType::f32, {tokens, dims.num_q_heads, dims.head_dim});
  HostKvCache& h = const_cast<HostKvCache&>(cache);
  for (auto [view, precision] : {std::pair{exact_view, ReferencePrecision::fp64},
                                 std::pair{naive_view, ReferencePrecision::naive}}) {
    const Status s =
        testing::is_paged(h.layout)
            ? reference_attention(
                  batch, dims, q,
                  h.paged_view(h.k.data(), h.v.data(), h.block_table.data(), Device::cpu), view,
                  scale, precision, ReferencePart::all, rows)
            : reference_attention(batch, dims, q, h.view(h.k.data(), h.v.data(), Device::cpu), view,
                                  scale, precision, ReferencePart::all, rows);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  Comparison c;
  const std::size_t row_elems = static_cast<std::size_t>(dims.num_q_heads) * dims.head_dim;
  for (int row : rows) {
    for (std::size_t j = 0; j < row_elems; ++j) {
      const std::size_t i = row * row_elems + j;
      const double ref = exact[i];
      c.max_err = std::max(c.max_err, std::abs(to_float(dims.dtype, out[i]) - ref));
      c.naive_err = std::max(c.naive_err, std::abs(naive[i] - ref));
      // FlashAttention-3's atol: the dtype's rounding noise at the outputs' scale.
      const float noisy = round_to(dims.dtype, round_to(dims.dtype, exact[i] + 0.3f) - 0.3f);
      c.atol = std::max(c.atol, 2.0 * std::abs(noisy - ref));
    }
  }
  std::printf("[attention] %-44s rows %5zu  max err %.3e  naive %.3e  bound %.3e\n", label,
              rows.size(), c.max_err, c.naive_err, c.bound());
  EXPECT_LE(c.max_err, c.bound()) << label;
  return c;
}

std::string label_of(const AttentionDims& d, KvLayout layout, const char* what) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s %s d%d g%d %s", what, dtype_name(d.dtype).data(), d.head_dim,
                d.group_size(), testing::layout_name(layout));
  return buf;
}

// One step on a fresh cache holding random cached tokens; checks the result.
struct StepResult {
  std::vector<std::uint16_t> out;
  Comparison cmp;
};

StepResult run_and_check(const AttentionDims& dims, KvLayout layout, const HybridBatch& batch,
                         const PlanOptions& options, std::mt19937_64& rng, const char* what,
                         bool use_graph = false) {
  HostKvCache cache(dims, layout, num_seqs(batch), max_context(batch), rng);
  cache.fill_cached(batch, rng);
  const StepInputs in = random_inputs(dims, batch.num_tokens(), rng);
  GpuAttention gpu(cache);
  const float scale = 1.f / std::sqrt(static_cast<float>(dims.head_dim));
  StepResult r;
  r.out = gpu.step(batch, in, options, scale, use_graph);
  const std::vector<int> rows = rows_to_check(batch, rng);
  r.cmp = compare_with_reference(cache, batch, in, r.out, scale, rows,
                                 label_of(dims, layout, what).c_str());
  return r;
}

// The mixed batch of the sweep: chunks with contexts 255, 17 (a 1-token
// chunk) and 4095 (split: short chunk, long context), decodes with contexts
// 1, 17, 255, 4095 and 16385.
HybridBatch sweep_batch() {
  return make_batch({{0, 255}, {16, 1}, {3840, 255}}, {1, 17, 255, 4095, 16385});
}

TEST(AttentionGpuTest, KernelsFitThePlannedOccupancy) {
  VPOD_REQUIRE_GPU();
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int d : {64, 128}) {
      const int prefill = detail::ctas_per_sm(detail::KernelKind::prefill, dtype, d).value();
      const int decode = detail::ctas_per_sm(detail::KernelKind::decode, dtype, d).value();
      const int heads = detail::ctas_per_sm(detail::KernelKind::decode_heads, dtype, d).value();
      std::printf("[attention] %s d%d: prefill %d CTAs/SM, decode %d CTAs/SM, heads %d CTAs/SM\n",
                  dtype_name(dtype).data(), d, prefill, decode, heads);
      EXPECT_GE(prefill, kPrefillCtasPerSm);
      // The warp-specialized prefill: one persistent CTA per SM on sm_90a.
      const int ws = detail::ctas_per_sm(detail::KernelKind::prefill_ws, dtype, d).value();
      std::printf("[attention] %s d%d: warp-specialized prefill %d CTAs/SM\n",
                  dtype_name(dtype).data(), d, ws);
      if (compute_major() == 9) {
        EXPECT_EQ(ws, 1);
        // Its K/V-multicast form runs in clusters of 2 that must cover every
        // SM, or the launcher never picks it.
        const int pairs = detail::ws_multicast_clusters(dtype, d).value();
        std::printf("[attention] %s d%d: %d K/V-multicast clusters of 2 on %d SMs\n",
                    dtype_name(dtype).data(), d, pairs, num_sms());
        EXPECT_GE(2 * pairs, num_sms() - 1);
      }
      EXPECT_GE(decode, kDecodeCtasPerSm);
      EXPECT_GE(heads, kDecodeCtasPerSm);
      if (detail::decode_deep_supported(dtype, d)) {
        // The deep kernel: one CTA per SM, which its plan counts on.
        const int deep = detail::decode_deep_ctas_per_sm(dtype, d).value();
        std::printf("[attention] %s d%d: deep decode %d CTAs/SM\n", dtype_name(dtype).data(), d,
                    deep);
        EXPECT_EQ(deep, 1);
      }
      const DecodeClusterSlots slots =
          query_decode_cluster_slots({8, 8, d, dtype}).value();  // what the planner gets
      if (detail::decode_cluster_supported(dtype, d)) {
        // Clusters of 2 (16 x 16K) must fill the SMs the planner counts on;
        // larger ones may strand slots, which the planner is told.
        for (int size = 2; size <= kMaxDecodeClusterSize; ++size) {
          const int clusters = detail::decode_cluster_max_active(dtype, d, size).value();
          std::printf("[attention] %s d%d: %d active decode clusters of %d on %d SMs\n",
                      dtype_name(dtype).data(), d, clusters, size, num_sms());
          if (size == 2) {
            EXPECT_GE(clusters * size, num_sms() * kDecodeCtasPerSm * 9 / 10);
          }
          EXPECT_GE(clusters, 1);
          EXPECT_EQ(slots[size], clusters * size);
          EXPECT_LE(slots[size], num_sms() * decode);  // never more than a plain launch's
        }
      } else {
        EXPECT_EQ(slots, DecodeClusterSlots{});
      }
    }
  }
}

TEST(AttentionGpuTest, MatchesReferenceAcrossDtypesDimsGroupsLayouts) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  const PlanOptions options{num_sms(), 0, 0};
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int d : {64, 128}) {
      for (int group : {1, 4, 7, 8}) {
        for (KvLayout layout : {KvLayout::per_layer, KvLayout::all_layers}) {
          const AttentionDims dims{2 * group, 2, d, dtype};
          run_and_check(dims, layout, sweep_batch(), options, rng, "sweep");
        }
      }
    }
  }
}

// The heads decode kernel (one warp per KV head / head chunk, 4 per CTA),
// forced by PlanOptions::decode_kernel: KV head counts that fill a CTA (8),
// leave warps idle (3, 6: CTAs of 4 + 2), MHA, group 7, two head chunks per
// KV head (group 20); planned and forced splits (merged per warp, counters
// reset: every step runs twice).
TEST(AttentionGpuTest, HeadsDecodeKernelMatchesReference) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  const HybridBatch decodes = make_batch({}, {1, 17, 255, 4095, 16385, 1000});
  struct Shape {
    int kv_heads, group;
  };
  int runs = 0;
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int d : {64, 128}) {
      for (Shape shape : {Shape{8, 4}, Shape{6, 7}, Shape{3, 1}, Shape{2, 20}}) {
        const AttentionDims dims{shape.kv_heads * shape.group, shape.kv_heads, d, dtype};
        const int splits = std::array<int, 3>{0, 7, 64}[runs % 3];
        const KvLayout layout = runs % 2 == 0 ? KvLayout::per_layer : KvLayout::all_layers;
        ++runs;
        PlanOptions options{num_sms(), 0, splits};
        options.decode_kernel = DecodeKernel::heads;
        const std::uint64_t seed = rng();
        std::mt19937_64 rng_a(seed);
        HostKvCache contiguous(dims, layout, num_seqs(decodes), max_context(decodes), rng_a);
        contiguous.fill_cached(decodes, rng_a);
        const StepInputs in = random_inputs(dims, decodes.num_tokens(), rng_a);
        const float scale = 1.f / std::sqrt(static_cast<float>(d));
        GpuAttention gpu_contiguous(contiguous);
        const auto out = gpu_contiguous.step(decodes, in, options, scale);
        char label[96];
        std::snprintf(label, sizeof label, "heads splits %d", splits);
        compare_with_reference(contiguous, decodes, in, out, scale, rows_to_check(decodes, rng_a),
                               label_of(dims, layout, label).c_str());
      }
    }
  }
}

// The cluster-merged decode on the tile and heads kernels (sm_90): batches
// whose decodes all split the same number of ways (planned, or forced;
// clusters of 2, 4 and 8), odd lengths (the last split is short), groups
// 4 / 7 / 1 / 20 (two head chunks) / 8, fp16 and bf16, head_dim 64 and 128,
// per-layer and all-layers; against the reference, == the counter merge of
// the same plan bit for bit, graph replays.
TEST(AttentionGpuTest, ClusterMergedDecodeMatchesReference) {
  VPOD_REQUIRE_GPU();
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  auto rng = fresh_rng();
  struct Case {
    int kv_heads, group, splits;
    std::vector<int> contexts;
  };
  // Small caches (the host fill and the bitwise cache check dominate the run
  // time). Planned: 16 decodes x 8 KV heads split 2 ways on the tile kernel
  // (128 -> 256 CTAs), 8 ways on the heads kernel (32 -> 256 CTAs).
  std::vector<int> planned(16, 1024);
  planned[2] = 1000;
  planned[15] = 999;
  const std::vector<Case> cases = {
      {8, 4, 0, planned},
      {2, 7, 2, {4095, 4095, 4000}},
      {3, 1, 3, {255, 255, 250, 255}},
      {2, 20, 5, {1000, 999, 1001}},
      {1, 8, 8, {16385, 16384}},
      {4, 4, 4, {4097, 4100, 4000}},
  };
  // Each case on two of the four (dtype, head_dim) pairs, every pair three times.
  using Pair = std::pair<DType, int>;
  const std::array<std::array<Pair, 2>, 2> pairs = {
      std::array<Pair, 2>{Pair{DType::f16, 128}, Pair{DType::bf16, 64}},
      std::array<Pair, 2>{Pair{DType::bf16, 128}, Pair{DType::f16, 64}}};
  int runs = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    for (const auto& [dtype, d] : pairs[ci % 2]) {
      for (DecodeKernel kernel : {DecodeKernel::tile, DecodeKernel::heads}) {
        const AttentionDims dims{c.kv_heads * c.group, c.kv_heads, d, dtype};
        const HybridBatch decodes = make_batch({}, c.contexts);
        const KvLayout layout = runs % 2 == 0 ? KvLayout::per_layer : KvLayout::all_layers;
        ++runs;
        PlanOptions options{num_sms(), 0, c.splits};
        options.decode_kernel = kernel;
        const AttentionPlan plan = AttentionPlan::create(decodes, dims, options).value();
        ASSERT_GE(plan.decode_cluster_size(), 2) << "the case must plan even splits";
        if (major >= 9) {
          ASSERT_TRUE(detail::decode_cluster_supported(dtype, d) &&
                      detail::decode_heads_cluster_supported(dtype, d))
              << "sm_90 runs the cluster merge";
        }
        const std::uint64_t seed = rng();
        std::mt19937_64 rng_a(seed);
        HostKvCache contiguous(dims, layout, num_seqs(decodes), max_context(decodes), rng_a);
        contiguous.fill_cached(decodes, rng_a);
        const StepInputs in = random_inputs(dims, decodes.num_tokens(), rng_a);
        const float scale = 1.f / std::sqrt(static_cast<float>(d));
        GpuAttention gpu_contiguous(contiguous);
        // Graph replay for every other case (each step runs twice either way).
        const auto out = gpu_contiguous.step(decodes, in, options, scale, runs % 2 == 0);
        char label[96];
        std::snprintf(label, sizeof label, "%s cluster %d",
                      kernel == DecodeKernel::heads ? "heads" : "tile", plan.decode_cluster_size());
        compare_with_reference(contiguous, decodes, in, out, scale, rows_to_check(decodes, rng_a),
                               label_of(dims, layout, label).c_str());
        // The same plan merged through the arrival counters (fp32 partial rows
        // in global memory): the same arithmetic in the same order, the same bits
        // (POD's fused kernel merges that way and is compared bit for bit).
        PlanOptions counters = options;
        counters.decode_cluster_merge = false;
        const auto out_counters = gpu_contiguous.step(decodes, in, counters, scale);
        EXPECT_TRUE(out == out_counters) << label_of(dims, layout, label) << " vs counters";
      }
    }
  }
}

// The deep decode kernel (one CTA per SM, 6 or 8 pipeline stages), forced by
// PlanOptions::decode_kernel: fresh random inputs, poisoned outputs (every
// step runs twice, poisoned again in between), odd lengths 1 / 17 / 255 /
// 4095 / 16385, groups 4 / 7 / 1 / 20 (two head chunks), fp16 / bf16, d64 /
// d128, per-layer / all-layers; planned (unsplit) and forced splits (the
// counter merge, counters reset); against the fp64 reference, and == the
// tile kernel on the same items bit for bit (the same arithmetic, only the
// pipeline depth differs). Then the batch
// the automatic plan gives it (16 decodes x 8 KV heads) with a graph replay.
TEST(AttentionGpuTest, DeepDecodeKernelMatchesReference) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  const HybridBatch decodes = make_batch({}, {1, 17, 255, 4095, 16385, 1000});
  struct Shape {
    int kv_heads, group;
  };
  int runs = 0;
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int d : {64, 128}) {
      if (!detail::decode_deep_supported(dtype, d)) {
        std::printf(
            "[attention] %s d%d: deep decode unsupported here (shared memory); the "
            "launcher runs the tile kernel\n",
            dtype_name(dtype).data(), d);
      }
      for (Shape shape : {Shape{8, 4}, Shape{6, 7}, Shape{3, 1}, Shape{2, 20}}) {
        const AttentionDims dims{shape.kv_heads * shape.group, shape.kv_heads, d, dtype};
        const int splits = std::array<int, 3>{0, 3, 2}[runs % 3];
        const KvLayout layout = runs % 2 == 0 ? KvLayout::per_layer : KvLayout::all_layers;
        ++runs;
        PlanOptions options{num_sms(), 0, splits};
        options.decode_kernel = DecodeKernel::tile_deep;
        const AttentionPlan plan = AttentionPlan::create(decodes, dims, options).value();
        ASSERT_EQ(plan.decode_kernel(), DecodeKernel::tile_deep);
        ASSERT_EQ(plan.decode_cluster_size(), 0);
        const std::uint64_t seed = rng();
        std::mt19937_64 rng_a(seed);
        HostKvCache contiguous(dims, layout, num_seqs(decodes), max_context(decodes), rng_a);
        contiguous.fill_cached(decodes, rng_a);
        const StepInputs in = random_inputs(dims, decodes.num_tokens(), rng_a);
        const float scale = 1.f / std::sqrt(static_cast<float>(d));
        GpuAttention gpu_contiguous(contiguous);
        const auto out = gpu_contiguous.step(decodes, in, options, scale);
        char label[96];
        std::snprintf(label, sizeof label, "deep splits %d (%zu items)", splits,
                      plan.decode_items().size());
        compare_with_reference(contiguous, decodes, in, out, scale, rows_to_check(decodes, rng_a),
                               label_of(dims, layout, label).c_str());
        // The tile kernel on the same items (the plan's split count forced;
        // even splits merge as a cluster, which gives the counters' bits).
        int max_splits = 1;
        for (const CombineItem& c : plan.decode_combines()) {
          max_splits = std::max(max_splits, static_cast<int>(c.num_splits));
        }
        PlanOptions tile{num_sms(), 0, max_splits};
        tile.decode_kernel = DecodeKernel::tile;
        const AttentionPlan tile_plan = AttentionPlan::create(decodes, dims, tile).value();
        ASSERT_EQ(tile_plan.decode_items().size(), plan.decode_items().size());
        const auto out_tile = gpu_contiguous.step(decodes, in, tile, scale);
        EXPECT_TRUE(out == out_tile) << label_of(dims, layout, label) << " vs the tile kernel";
      }
    }
  }
  // The automatic plan's batch shape (16 decodes x 8 KV heads on >= 128
  // SMs: unsplit on the deep kernel), small contexts, odd lengths, graph replay.
  std::vector<int> contexts(16, 1024);
  contexts[0] = 1023;
  contexts[5] = 17;
  contexts[15] = 1025;
  const HybridBatch few = make_batch({}, contexts);
  const PlanOptions automatic{num_sms(), 0, 0};
  const AttentionDims llama{32, 8, 128, DType::f16};
  const AttentionPlan plan = AttentionPlan::create(few, llama, automatic).value();
  if (num_sms() >= 128) {
    EXPECT_EQ(plan.decode_kernel(), DecodeKernel::tile_deep);
    EXPECT_EQ(plan.decode_items().size(), contexts.size());
  }
  run_and_check(llama, KvLayout::per_layer, few, automatic, rng, "deep planned", true);
}

TEST(AttentionGpuTest, WideGroupsUseSeveralHeadChunks) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  run_and_check({40, 2, 128, DType::bf16}, KvLayout::per_layer, sweep_batch(), {num_sms(), 0, 0},
                rng, "group20");
}

TEST(AttentionGpuTest, LongPromptsAndForcedSplits) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  run_and_check({8, 2, 128, DType::f16}, KvLayout::per_layer, make_batch({{0, 16385}}, {}),
                {num_sms(), 0, 0}, rng, "prompt16385");
  run_and_check({14, 2, 64, DType::bf16}, KvLayout::all_layers, make_batch({{0, 4095}}, {}),
                {num_sms(), 0, 0}, rng, "prompt4095");
  run_and_check({16, 2, 128, DType::f16}, KvLayout::per_layer, sweep_batch(), {num_sms(), 5, 7},
                rng, "forced-splits");
  run_and_check({8, 8, 64, DType::bf16}, KvLayout::per_layer, sweep_batch(), {num_sms(), 0, 64},
                rng, "forced-splits-max");
}

// The warp-specialized prefill kernel (persistent, 128-key blocks, TMA Q
// and K/V, cp.async for a split's partial last block) and the one-warpgroup
// wgmma tile it replaces, on the same inputs: both within the reference bound
// and within twice it of each other. Shapes: more tiles than SMs (a CTA walks
// several), a 16385-token prompt, every remainder of 128 keys (the sweep's
// 255/1/4095 chunks), chunks over cached context, forced splits (fp32
// partial rows), head_dim 64 and 128, fp16 and bf16, both layouts, MQA,
// groups 4, 5 and 8.
TEST(AttentionGpuTest, WarpSpecializedPrefillMatchesTheWgmmaTile) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    AttentionDims dims;
    KvLayout layout;
    HybridBatch batch;
    int splits;
    const char* label;
  };
  const std::vector<Case> cases = {
      {{32, 8, 128, DType::f16}, KvLayout::per_layer, make_batch({{0, 4097}}, {}), 0, "ws 4097"},
      {{20, 4, 128, DType::bf16},
       KvLayout::all_layers,
       make_batch({{0, 16385}}, {}),
       0,
       "ws 16385 g5"},
      {{16, 2, 128, DType::bf16},
       KvLayout::all_layers,
       make_batch({{7000, 1100}, {0, 129}, {300, 1}}, {}),
       0,
       "ws chunks"},
      {{8, 1, 64, DType::f16},
       KvLayout::all_layers,
       make_batch({{0, 2049}, {5000, 77}}, {}),
       0,
       "ws d64 mqa"},
      {{32, 8, 64, DType::bf16}, KvLayout::per_layer, sweep_batch(), 0, "ws d64 sweep"},
      {{16, 2, 128, DType::f16}, KvLayout::per_layer, sweep_batch(), 5, "ws splits"},
      {{8, 8, 128, DType::bf16},
       KvLayout::all_layers,
       make_batch({{1000, 700}}, {}),
       3,
       "ws splits mha"},
      // GQA packing: every chunk at most 128 / group tokens, so a tile holds a
      // KV head's whole group (groups 4, 5, 7, 8 and MQA's 8; split or not).
      {{32, 8, 128, DType::f16},
       KvLayout::per_layer,
       make_batch({{8000, 32}, {300, 5}, {0, 17}}, {}),
       0,
       "ws packed g4"},
      {{20, 4, 128, DType::bf16},
       KvLayout::all_layers,
       make_batch({{5000, 25}, {0, 1}}, {}),
       0,
       "ws packed g5"},
      {{14, 2, 64, DType::bf16},
       KvLayout::all_layers,
       make_batch({{3000, 18}, {100, 9}}, {}),
       3,
       "ws packed g7 splits"},
      {{8, 1, 64, DType::f16},
       KvLayout::per_layer,
       make_batch({{6000, 16}}, {}),
       0,
       "ws packed mqa"},
      {{16, 2, 128, DType::f16},
       KvLayout::per_layer,
       make_batch({{12000, 16}, {40, 3}}, {}),
       0,
       "ws packed g8 planned splits"},
      // Packing per item: short turns beside chunks too long to pack.
      {{32, 8, 128, DType::f16},
       KvLayout::per_layer,
       make_batch({{0, 1500}, {8000, 16}, {300, 32}, {5000, 3}}, {}),
       0,
       "ws mixed g4"},
      {{20, 4, 128, DType::bf16},
       KvLayout::all_layers,
       make_batch({{2000, 700}, {6000, 25}, {0, 1}}, {}),
       3,
       "ws mixed g5 splits"},
      {{14, 2, 64, DType::f16},
       KvLayout::per_layer,
       make_batch({{100, 18}, {0, 300}, {4000, 9}}, {}),
       0,
       "ws mixed g7 d64"},
      // K/V multicast (clusters of 2: query heads 2k, 2k + 1 share each K/V
      // block; the pairs walk item-major): a chunk with partial last blocks
      // beside a prompt, prompts at d64, a grid smaller than the GPU (group 2,
      // planned splits; whole tiles, since a short one would pack), and a
      // chunk whose items cost alike (one CTA per tile walks it head-major).
      {{32, 8, 128, DType::bf16},
       KvLayout::per_layer,
       make_batch({{3000, 1024}, {0, 500}}, {}),
       0,
       "ws multicast chunk and prompt"},
      {{16, 4, 64, DType::f16},
       KvLayout::all_layers,
       make_batch({{0, 2000}, {500, 700}}, {}),
       0,
       "ws multicast d64"},
      {{4, 2, 128, DType::f16},
       KvLayout::all_layers,
       make_batch({{0, 384}}, {}),
       0,
       "ws multicast small grid"},
      {{32, 8, 128, DType::f16},
       KvLayout::per_layer,
       make_batch({{3000, 512}}, {}),
       0,
       "ws multicast alike chunk"},
  };
  for (const Case& c : cases) {
    HostKvCache cache(c.dims, c.layout, num_seqs(c.batch), max_context(c.batch), rng);
    cache.fill_cached(c.batch, rng);
    HostKvCache cache_tile = cache;
    HostKvCache cache_packed = cache, cache_unpacked = cache;
    const StepInputs in = random_inputs(c.dims, c.batch.num_tokens(), rng);
    GpuAttention gpu_ws(cache), gpu_tile(cache_tile);
    const float scale = 1.f / std::sqrt(static_cast<float>(c.dims.head_dim));
    PlanOptions ws{num_sms(), c.splits, 0};
    PlanOptions tile = ws;
    tile.kernels.ws_prefill = false;
    const auto out_ws = gpu_ws.step(c.batch, in, ws, scale);
    const auto out_tile = gpu_tile.step(c.batch, in, tile, scale);
    const std::vector<int> rows = rows_to_check(c.batch, rng);
    const Comparison cw = compare_with_reference(cache, c.batch, in, out_ws, scale, rows,
                                                 label_of(c.dims, c.layout, c.label).c_str());
    const Comparison ct = compare_with_reference(cache_tile, c.batch, in, out_tile, scale, rows,
                                                 label_of(c.dims, c.layout, "wgmma tile").c_str());
    double max_diff = 0;
    for (std::size_t i = 0; i < out_ws.size(); ++i) {
      max_diff = std::max<double>(max_diff, std::abs(to_float(c.dims.dtype, out_ws[i]) -
                                                     to_float(c.dims.dtype, out_tile[i])));
    }
    EXPECT_LE(max_diff, 2 * std::max(cw.bound(), ct.bound())) << c.label;
    const AttentionPlan plan = AttentionPlan::create(c.batch, c.dims, ws).value();
    const int items = static_cast<int>(plan.prefill_items().size());
    if (std::string_view(c.label).starts_with("ws packed")) {
      ASSERT_EQ(plan.prefill_pack(), c.dims.group_size()) << c.label << ": the case must pack";
    } else if (std::string_view(c.label).starts_with("ws mixed")) {
      ASSERT_TRUE(plan.prefill_pack_mixed()) << c.label << ": the case must pack some items";
      ASSERT_LT(plan.prefill_packed_items(), items) << c.label << ": ... but not all";
    } else {
      EXPECT_EQ(plan.prefill_pack(), 1) << c.label;
    }
    if (std::string_view(c.label).starts_with("ws multicast")) {
      // One query head per tile, an even group: the launcher multicasts
      // wherever its clusters cover the SMs (KernelsFitThePlannedOccupancy).
      ASSERT_FALSE(plan.prefill_pack_mixed()) << c.label;
      ASSERT_EQ(plan.prefill_items_cost_alike(),
                c.label == std::string_view("ws multicast alike chunk"))
          << c.label << ": the case must walk as its label says";
      ASSERT_EQ(c.dims.group_size() % 2, 0) << c.label;
    }
    {
      // Multicast loads the same bytes and runs the same arithmetic as one CTA
      // per tile: same bits (trivially so where the walk does not multicast).
      HostKvCache cache_single = cache;
      GpuAttention gpu_single(cache_single);
      PlanOptions single = ws;
      single.kernels.ws_multicast = false;
      const auto out_single = gpu_single.step(c.batch, in, single, scale);
      EXPECT_EQ(out_ws, out_single) << c.label << ": multicast and one CTA per tile differ";
    }
    if (plan.prefill_packed_items() > 0) {
      // Packed tiles run every row's arithmetic as one-head tiles do: same
      // bits for the same plan. (The planner splits a packed plan's keys
      // further, fewer CTAs filling the GPU, so planned splits differ: both
      // runs force the same.) The short chunks of the sweep batch pack too.
      PlanOptions packed = ws;
      packed.prefill_splits = c.splits > 0 ? c.splits : 2;
      PlanOptions unpacked = packed;
      unpacked.kernels.ws_gqa_pack = false;
      GpuAttention gpu_packed(cache_packed), gpu_unpacked(cache_unpacked);
      const auto out_packed = gpu_packed.step(c.batch, in, packed, scale);
      const auto out_unpacked = gpu_unpacked.step(c.batch, in, unpacked, scale);
      EXPECT_EQ(out_packed, out_unpacked) << c.label << ": packed and one-head tiles differ";
    }
  }
}

// Scores that rise as the prefill kernels walk their keys (last block first):
// a ramp toward key 0 that grows slower than the lazy max's slack per block
// (exponents climbing toward 2^8 before the max moves), and sinks that beat
// the running max by far more (at key 0, at the middle, in the cached context
// of a chunk). Random scores never move a lazy max after a tile's first block;
// these do, on both sides of the slack. In each prefill kernel (the
// warp-specialized one, the wgmma and the mma.sync tiles) the lazy and the
// exact max must both match the reference.
TEST(AttentionGpuTest, PrefillKernelsFollowRisingMaxima) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    AttentionDims dims;
    KvLayout layout;
    HybridBatch batch;
    const char* label;
  };
  const std::vector<Case> cases = {
      {{32, 8, 128, DType::f16}, KvLayout::per_layer, make_batch({{0, 2049}}, {}), "rising prompt"},
      {{16, 2, 64, DType::bf16},
       KvLayout::all_layers,
       make_batch({{1500, 600}, {0, 700}}, {}),
       "rising chunk"},
  };
  for (const Case& c : cases) {
    const AttentionDims& d = c.dims;
    HostKvCache cache(d, c.layout, num_seqs(c.batch), max_context(c.batch), rng);
    cache.fill_cached(c.batch, rng);
    StepInputs in = random_inputs(d, c.batch.num_tokens(), rng);
    // Every query and key leans on one direction u (entries +-1): a key at
    // position t with weight a(t) scores about 0.5 a(t) |u|^2 scale higher.
    std::bernoulli_distribution coin(0.5);
    std::vector<float> u(d.head_dim);
    for (float& x : u) x = coin(rng) ? 1.f : -1.f;
    auto lean = [&](std::uint16_t* x, float weight) {
      for (int i = 0; i < d.head_dim; ++i) {
        x[i] = testing::to_bits(d.dtype, to_float(d.dtype, x[i]) + weight * u[i]);
      }
    };
    for (const BatchSequence& s : c.batch.prefills) {
      const int n = s.cached_len + s.num_new;
      auto weight = [n](int t) {
        return 1.5f * static_cast<float>(n - t) / n + (t == 0 ? 5.f : 0.f) +
               (t == n / 2 ? 2.5f : 0.f) + (t == n / 3 ? 3.f : 0.f);
      };
      for (int t = 0; t < n; ++t) {
        for (int h = 0; h < d.num_kv_heads; ++h) {
          if (t < s.cached_len) {
            lean(&cache.k[cache.index(s.slot, t, h)], weight(t));
          } else {
            const int row = s.token_offset + t - s.cached_len;
            lean(&in.k_new[(static_cast<std::size_t>(row) * d.num_kv_heads + h) * d.head_dim],
                 weight(t));
          }
        }
      }
      for (int i = 0; i < s.num_new; ++i) {
        for (int h = 0; h < d.num_q_heads; ++h) {
          const int row = s.token_offset + i;
          lean(&in.q[(static_cast<std::size_t>(row) * d.num_q_heads + h) * d.head_dim], 0.5f);
        }
      }
    }
    const float scale = 1.f / std::sqrt(static_cast<float>(d.head_dim));
    const std::vector<int> rows = rows_to_check(c.batch, rng);
    struct Kernel {
      const char* name;
      bool ws, wgmma;
    };
    for (const Kernel k : {Kernel{"ws", true, true}, Kernel{"wgmma tile", false, true},
                           Kernel{"mma.sync tile", false, false}}) {
      const std::string label = std::string(c.label) + " (" + k.name + ")";
      HostKvCache cache_lazy = cache, cache_exact = cache;
      GpuAttention gpu_lazy(cache_lazy), gpu_exact(cache_exact);
      PlanOptions lazy{num_sms(), 0, 0};
      lazy.kernels.ws_prefill = k.ws;
      lazy.kernels.wgmma_prefill = k.wgmma;
      PlanOptions exact = lazy;
      exact.kernels.lazy_max = false;
      const auto out_lazy = gpu_lazy.step(c.batch, in, lazy, scale);
      const auto out_exact = gpu_exact.step(c.batch, in, exact, scale);
      const Comparison cl = compare_with_reference(cache_lazy, c.batch, in, out_lazy, scale, rows,
                                                   label_of(d, c.layout, label.c_str()).c_str());
      const Comparison ce =
          compare_with_reference(cache_exact, c.batch, in, out_exact, scale, rows,
                                 label_of(d, c.layout, (label + ", exact max").c_str()).c_str());
      double max_diff = 0;
      for (std::size_t i = 0; i < out_lazy.size(); ++i) {
        max_diff = std::max<double>(
            max_diff, std::abs(to_float(d.dtype, out_lazy[i]) - to_float(d.dtype, out_exact[i])));
      }
      EXPECT_LE(max_diff, 2 * std::max(cl.bound(), ce.bound())) << label;
    }
  }
}

// Contiguous caches of both layouts (GQA and MQA, fp16 and bf16, head_dim
// 64 and 128) get TMA descriptors on sm_90; shapes the 64-dim box cannot
// express, 4-byte elements and host memory are refused with a reason.
TEST(AttentionGpuTest, ContiguousCachesGetTmaDescriptors) {
  VPOD_REQUIRE_GPU();
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (major < 9) GTEST_SKIP() << "TMA needs compute capability 9.0, this GPU has " << major;
  auto rng = fresh_rng();
  for (auto [dims, layout] :
       {std::pair{AttentionDims{32, 8, 128, DType::bf16}, KvLayout::per_layer},
        std::pair{AttentionDims{32, 8, 128, DType::f16}, KvLayout::all_layers},
        std::pair{AttentionDims{8, 1, 64, DType::f16}, KvLayout::per_layer},
        std::pair{AttentionDims{14, 2, 64, DType::bf16}, KvLayout::all_layers}}) {
    HostKvCache host(dims, layout, 3, 300, rng);
    cuda::DeviceBuffer k = cuda::DeviceBuffer::allocate(host.k.size() * 2).value();
    cuda::DeviceBuffer v = cuda::DeviceBuffer::allocate(host.v.size() * 2).value();
    const KvLayerView view = host.view(k.data(), v.data(), Device::cuda);
    KvTensorMaps maps;
    const Status st = encode_kv_tensor_maps(view, maps);
    EXPECT_TRUE(st.ok()) << label_of(dims, layout, "tma") << ": " << st.message();
    EXPECT_EQ(maps.valid, 1);
    EXPECT_EQ(contiguous_tensor_maps(view).valid, 1);

    KvLayerView odd = view;
    odd.head_dim = 96;
    EXPECT_FALSE(encode_kv_tensor_maps(odd, maps).ok());
    EXPECT_EQ(maps.valid, 0);
    KvLayerView wide = view;
    wide.dtype = DType::f32;
    EXPECT_FALSE(encode_kv_tensor_maps(wide, maps).ok());
    KvLayerView host_view = view;
    host_view.device = Device::cpu;
    EXPECT_FALSE(encode_kv_tensor_maps(host_view, maps).ok());
    KvLayerView unaligned = view;
    unaligned.token_stride += 1;  // not a multiple of 16 bytes: the driver refuses it
    EXPECT_FALSE(encode_kv_tensor_maps(unaligned, maps).ok());
    EXPECT_EQ(contiguous_tensor_maps(unaligned).valid, 0);
  }
}

// The paged baseline: FlashInfer's kernels (FA3 prefill on sm_90a, FA2
// elsewhere; the tensor-core decode) on the sweep batch (chunks of 255, 1 and
// 255 tokens after 0, 16 and 3840 cached; decodes at 1, 17, 255, 4095,
// 16385: lengths 1, odd, and many pages), GQA groups 1 / 4 / 7 / 8, fp16 and
// bf16, page sizes 1 / 16 / 64 / 256, against the fp64 reference with the
// bound every kernel here meets.
TEST(AttentionGpuTest, FlashInferPagedMatchesReference) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  const PlanOptions options{num_sms(), 0, 0};
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int group : {1, 4, 7, 8}) {
      for (KvLayout layout :
           {KvLayout::paged1, KvLayout::paged16, KvLayout::paged64, KvLayout::paged256}) {
        // Every page size with every group once, in one of the two dtypes.
        if ((static_cast<int>(layout) + group + (dtype == DType::bf16 ? 1 : 0)) % 2 != 0) continue;
        const AttentionDims dims{2 * group, 2, 128, dtype};
        run_and_check(dims, layout, sweep_batch(), options, rng, "flashinfer");
      }
    }
  }
  // Llama-3-8B's heads, a batch of decodes only and a prompt longer than
  // FA3's 128-row tile and many pages.
  run_and_check({32, 8, 128, DType::bf16}, KvLayout::paged16,
                make_batch({}, {1, 2, 15, 16, 17, 4097}), options, rng, "flashinfer decodes");
  run_and_check({32, 8, 128, DType::f16}, KvLayout::paged16, make_batch({{0, 1025}}, {}), options,
                rng, "flashinfer prompt");
}

// FlashInfer's POD kernel (the paged baseline's --attention pod) on the
// sweep batch and on Llama-3-8B's heads with a long chunk beside many
// decodes: every step must run fused (one launch) and meet the reference's
// bound; fp16 and bf16, groups 1 / 4 / 8, pages of 1 / 16 / 64. A group of 20
// runs serially (POD's 16-row decode tile) and still matches.
TEST(AttentionGpuTest, FlashInferPodMatchesReference) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  const PlanOptions options{num_sms(), 0, 0};
  struct Case {
    AttentionDims dims;
    KvLayout layout;
    HybridBatch batch;
    bool fused;
  };
  const std::vector<Case> cases = {
      {{2, 2, 128, DType::f16}, KvLayout::paged16, sweep_batch(), true},
      {{8, 2, 128, DType::bf16}, KvLayout::paged1, sweep_batch(), true},
      {{16, 2, 128, DType::f16}, KvLayout::paged64, sweep_batch(), true},
      {{32, 8, 128, DType::bf16},
       KvLayout::paged16,
       make_batch({{1000, 1100}}, {1, 2, 17, 300, 4097, 4097, 8000, 9000}),
       true},
      {{32, 8, 128, DType::f16},
       KvLayout::paged16,
       make_batch({{0, 40}, {2000, 17}}, {5, 4097}),
       true},
      {{40, 2, 128, DType::f16}, KvLayout::paged16, sweep_batch(), false},
  };
  for (const Case& c : cases) {
    HostKvCache cache(c.dims, c.layout, num_seqs(c.batch), max_context(c.batch), rng);
    cache.fill_cached(c.batch, rng);
    const StepInputs in = random_inputs(c.dims, c.batch.num_tokens(), rng);
    GpuAttention gpu(cache, fi::PagedMode::pod);
    const float scale = 1.f / std::sqrt(static_cast<float>(c.dims.head_dim));
    const auto out = gpu.step(c.batch, in, options, scale);
    EXPECT_EQ(gpu.fused(), c.fused) << label_of(c.dims, c.layout, "flashinfer pod");
    compare_with_reference(cache, c.batch, in, out, scale, rows_to_check(c.batch, rng),
                           label_of(c.dims, c.layout, "flashinfer pod").c_str());
  }
}

// FlashInfer's paged kernels against vpod's contiguous ones on the same
// cached values: both within the reference's bound, so within twice it of
// each other (different kernels: not bitwise).
TEST(AttentionGpuTest, FlashInferPagedMatchesContiguous) {
  VPOD_REQUIRE_GPU();
  for (auto [dims, layout] : {std::pair{AttentionDims{8, 2, 128, DType::f16}, KvLayout::paged16},
                              std::pair{AttentionDims{16, 2, 128, DType::bf16}, KvLayout::paged64},
                              std::pair{AttentionDims{8, 8, 128, DType::bf16}, KvLayout::paged1}}) {
    const std::uint64_t seed = std::random_device{}();
    const HybridBatch batch = sweep_batch();
    const PlanOptions options{num_sms(), 0, 0};
    std::mt19937_64 rng_a(seed), rng_b(seed);
    HostKvCache contiguous(dims, KvLayout::per_layer, num_seqs(batch), max_context(batch), rng_a);
    HostKvCache paged(dims, layout, num_seqs(batch), max_context(batch), rng_b);
    // Same seed: the same cached values, in different places.
    rng_a.seed(seed);
    rng_b.seed(seed);
    contiguous.fill_cached(batch, rng_a);
    paged.fill_cached(batch, rng_b);
    const StepInputs in = random_inputs(dims, batch.num_tokens(), rng_a);
    const float scale = 0.1f;
    GpuAttention gpu_contiguous(contiguous), gpu_paged(paged);
    const auto out_contiguous = gpu_contiguous.step(batch, in, options, scale);
    const auto out_paged = gpu_paged.step(batch, in, options, scale);
    const std::vector<int> rows = rows_to_check(batch, rng_a);
    const Comparison a =
        compare_with_reference(contiguous, batch, in, out_contiguous, scale, rows,
                               label_of(dims, KvLayout::per_layer, "vpod").c_str());
    const Comparison b = compare_with_reference(paged, batch, in, out_paged, scale, rows,
                                                label_of(dims, layout, "flashinfer").c_str());
    double max_diff = 0;
    for (std::size_t i = 0; i < out_paged.size(); ++i) {
      max_diff = std::max<double>(max_diff, std::abs(to_float(dims.dtype, out_paged[i]) -
                                                     to_float(dims.dtype, out_contiguous[i])));
    }
    std::printf("[attention] flashinfer paged vs vpod contiguous: max diff %.3e (allowed %.3e)\n",
                max_diff, a.bound() + b.bound());
    EXPECT_LE(max_diff, a.bound() + b.bound()) << label_of(dims, layout, "paged vs contiguous");
  }
}

// FlashInfer's decode plan in its CUDA-graph mode (what decode-only engine
// steps replay): a captured and replayed step gives the bits of the same plan
// launched directly, and matches the reference; its fixed launch shape serves
// a second batch of the same size with other lengths.
TEST(AttentionGpuTest, FlashInferPagedGraphReplayEqualsDirectLaunch) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  const AttentionDims dims{32, 8, 128, DType::bf16};
  const PlanOptions options{num_sms(), 0, 0};
  for (const HybridBatch& batch :
       {make_batch({}, {2000, 5000, 33, 1}), make_batch({}, {17, 4097, 64, 300})}) {
    const std::uint64_t seed = rng();
    std::mt19937_64 rng_a(seed), rng_b(seed);
    HostKvCache cache_a(dims, KvLayout::paged16, num_seqs(batch), max_context(batch), rng_a);
    HostKvCache cache_b(dims, KvLayout::paged16, num_seqs(batch), max_context(batch), rng_b);
    rng_a.seed(seed);
    rng_b.seed(seed);
    cache_a.fill_cached(batch, rng_a);
    cache_b.fill_cached(batch, rng_b);
    const StepInputs in = random_inputs(dims, batch.num_tokens(), rng_a);
    const float scale = 0.09f;
    GpuAttention gpu_a(cache_a), gpu_b(cache_b);
    const auto direct = gpu_a.step(batch, in, options, scale, /*use_graph=*/false,
                                   /*flashinfer_graph_mode=*/true);
    const auto replayed = gpu_b.step(batch, in, options, scale, /*use_graph=*/true);
    EXPECT_TRUE(direct == replayed);
    compare_with_reference(cache_b, batch, in, replayed, scale, rows_to_check(batch, rng_a),
                           label_of(dims, KvLayout::paged16, "flashinfer graph").c_str());
  }
}

// Over vpod's contiguous kernels and FlashInfer's paged ones (page 16, and
// page 1 in bf16).
TEST(AttentionGpuTest, ChunkedPrefillEqualsOneShot) {
  VPOD_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (auto [dims, layout] :
       {std::pair{AttentionDims{8, 2, 128, DType::f16}, KvLayout::per_layer},
        std::pair{AttentionDims{8, 2, 128, DType::f16}, KvLayout::paged16},
        std::pair{AttentionDims{32, 8, 128, DType::bf16}, KvLayout::paged1}}) {
    const PlanOptions options{num_sms(), 0, 0};
    const int length = 4095;
    const std::vector<SeqSpec> chunks = {{0, 1000}, {1000, 1500}, {2500, 1595}};
    const float scale = 1.f / std::sqrt(128.f);
    HostKvCache cache_one(dims, layout, 1, length, rng);
    HostKvCache cache_chunked = cache_one;
    const StepInputs all = random_inputs(dims, length, rng);
    GpuAttention gpu_one(cache_one), gpu_chunked(cache_chunked);
    const HybridBatch one_shot = make_batch({{0, length}}, {}, {0});
    const auto out_one = gpu_one.step(one_shot, all, options, scale);
    const Comparison c_one = compare_with_reference(cache_one, one_shot, all, out_one, scale,
                                                    rows_to_check(one_shot, rng), "one-shot 4095");
    const std::size_t q_row = static_cast<std::size_t>(dims.num_q_heads) * dims.head_dim;
    const std::size_t kv_row = static_cast<std::size_t>(dims.num_kv_heads) * dims.head_dim;
    double max_diff = 0, max_bound = c_one.bound();
    for (const SeqSpec& chunk : chunks) {
      StepInputs in;
      in.q.assign(all.q.begin() + chunk.cached_len * q_row,
                  all.q.begin() + (chunk.cached_len + chunk.num_new) * q_row);
      in.k_new.assign(all.k_new.begin() + chunk.cached_len * kv_row,
                      all.k_new.begin() + (chunk.cached_len + chunk.num_new) * kv_row);
      in.v_new.assign(all.v_new.begin() + chunk.cached_len * kv_row,
                      all.v_new.begin() + (chunk.cached_len + chunk.num_new) * kv_row);
      const HybridBatch batch = make_batch({chunk}, {}, {0});
      const auto out = gpu_chunked.step(batch, in, options, scale);
      const Comparison c = compare_with_reference(cache_chunked, batch, in, out, scale,
                                                  rows_to_check(batch, rng), "chunk of 4095");
      max_bound = std::max(max_bound, c.bound());
      for (std::size_t i = 0; i < out.size(); ++i) {
        max_diff = std::max<double>(
            max_diff, std::abs(to_float(dims.dtype, out[i]) -
                               to_float(dims.dtype, out_one[chunk.cached_len * q_row + i])));
      }
    }
    std::printf("[attention] %s chunked vs one-shot: max diff %.3e (allowed %.3e)\n",
                testing::layout_name(layout), max_diff, 2 * max_bound);
    EXPECT_LE(max_diff, 2 * max_bound) << testing::layout_name(layout);
  }
}

// Over vpod's contiguous kernels and FlashInfer's paged ones (its tensor-core
// decode against its prefill of one token).
TEST(AttentionGpuTest, DecodeEqualsOneTokenPrefill) {
  VPOD_REQUIRE_GPU();
  for (auto [dtype, layout] :
       {std::pair{DType::f16, KvLayout::per_layer}, std::pair{DType::bf16, KvLayout::per_layer},
        std::pair{DType::f16, KvLayout::paged16}, std::pair{DType::bf16, KvLayout::paged64}}) {
    const std::uint64_t seed = std::random_device{}();
    const AttentionDims dims{14, 2, 128, dtype};
    const std::vector<int> contexts = {1, 17, 255, 4095, 16385};
    std::vector<SeqSpec> as_prefills;
    for (int ctx : contexts) as_prefills.push_back({ctx - 1, 1});
    const HybridBatch decodes = make_batch({}, contexts);
    const HybridBatch prefills = make_batch(as_prefills, {});
    std::mt19937_64 rng_a(seed), rng_b(seed);
    HostKvCache cache_a(dims, layout, 5, 16385, rng_a);
    HostKvCache cache_b(dims, layout, 5, 16385, rng_b);
    cache_a.fill_cached(decodes, rng_a);
    cache_b.fill_cached(prefills, rng_b);
    const StepInputs in = random_inputs(dims, 5, rng_a);
    GpuAttention gpu_a(cache_a), gpu_b(cache_b);
    const float scale = 0.08f;
    const auto out_decode = gpu_a.step(decodes, in, {num_sms(), 0, 0}, scale);
    const auto out_prefill = gpu_b.step(prefills, in, {num_sms(), 0, 0}, scale);
    const Comparison c = compare_with_reference(cache_a, decodes, in, out_decode, scale,
                                                rows_to_check(decodes, rng_a), "decode");
    double max_diff = 0;
    for (std::size_t i = 0; i < out_decode.size(); ++i) {
      max_diff = std::max<double>(
          max_diff, std::abs(to_float(dtype, out_decode[i]) - to_float(dtype, out_prefill[i])));
    }
    std::printf("[attention] %s %s decode vs one-token prefill: max diff %.3e (allowed %.3e)\n",
                dtype_name(dtype).data(), testing::layout_name(layout), max_diff, 2 * c.bound());
    EXPECT_LE(max_diff, 2 * c.bound()) << testing::layout_name(layout);
  }
}

TEST(AttentionGpuTest, GraphReplayEqualsDirectLaunch) {
  VPOD_REQUIRE_GPU();
  const std::uint64_t seed = std::random_device{}();
  const AttentionDims dims{32, 8, 128, DType::f16};
  const HybridBatch batch = make_batch({{1000, 300}}, {2000, 5000, 33});
  std::mt19937_64 rng_a(seed), rng_b(seed);
  HostKvCache cache_a(dims, KvLayout::all_layers, 4, 5000, rng_a);
  HostKvCache cache_b(dims, KvLayout::all_layers, 4, 5000, rng_b);
  cache_a.fill_cached(batch, rng_a);
  cache_b.fill_cached(batch, rng_b);
  const StepInputs in = random_inputs(dims, batch.num_tokens(), rng_a);
  GpuAttention gpu_a(cache_a), gpu_b(cache_b);
  const auto direct = gpu_a.step(batch, in, {num_sms(), 0, 0}, 0.09f);
  const auto replayed = gpu_b.step(batch, in, {num_sms(), 0, 0}, 0.09f, /*use_graph=*/true);
  EXPECT_TRUE(direct == replayed);
}

}  // namespace
}  // namespace vpod::attention
