// GPU tests of the fused POD kernel (label gpu). Every batch gets fresh random
// K/V, queries and NaN-poisoned outputs, caches and workspaces. For each batch:
//   - POD's prefill rows equal the separate prefill kernel's bit for bit (same
//     tile code, same plan: the wgmma tile on sm_90a, else mma.sync; a test
//     forces POD's mma.sync tile where the separate kernel runs wgmma, and
//     checks it against the reference only), and so do its decode rows (split
//     decodes merged in the kernel in both);
//   - POD's rows match the CPU fp64 reference on sampled rows within twice a
//     naive same-precision implementation's error plus FlashAttention-3's atol;
//   - every output element is finite (nothing left poisoned) and the
//     scheduling counters and the decode merge counters are zero again after
//     the launch.
// Plus the edge cases of issue #5, placement independence under a concurrent
// kernel that occupies SMs, and CUDA graph replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "cuda/device_buffer.h"
#include "cuda/graph.h"
#include "cuda/stream.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_reference.h"
#include "kernels/attention/pod.h"
#include "kernels/attention/pod_params.h"
#include "kernels/attention_test_util.h"
#include "support/gpu.h"

namespace vpod::attention {

// A kernel that holds `ctas` SMs (one CTA each, most of the SM's shared
// memory) for `ns` nanoseconds; each CTA counts itself in `started`
// (host-mapped) once resident.
__global__ void occupy_sms_kernel(unsigned long long ns, int* started) {
  extern __shared__ char hold[];
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (threadIdx.x == 0) {
    hold[0] = 1;
    atomicAdd_system(started, 1);
  }
  unsigned long long t = t0;
  while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
}

namespace {

// Progress lines reach the log even if a test is killed.
const bool kUnbuffered = [] { return std::setvbuf(stdout, nullptr, _IONBF, 0) == 0; }();

using testing::HostKvCache;
using testing::KvLayout;
using testing::make_batch;
using testing::SeqSpec;

std::mt19937_64 fresh_rng(const char* what) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("[pod] %s: seed %llu\n", what, static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
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

// The device as POD sees it; allow_wgmma = false: with the mma.sync prefill tile.
const PodDevice& device_for(const AttentionDims& dims, bool allow_wgmma = true) {
  static std::map<std::tuple<int, int, bool>, PodDevice> cache;
  const auto key = std::tuple{static_cast<int>(dims.dtype), dims.head_dim, allow_wgmma};
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto dev = query_pod_device(dims, allow_wgmma);
    EXPECT_TRUE(dev.ok()) << dev.status().to_string();
    it = cache.emplace(key, dev.ok() ? *dev : PodDevice{}).first;
  }
  return it->second;
}

struct Inputs {
  std::vector<std::uint16_t> q, k_new, v_new;
};

std::string describe(const HybridBatch& b) {
  std::string s = "prefills [";
  for (const auto& p : b.prefills) {
    s += std::to_string(p.num_new) + "@" + std::to_string(p.context_len()) + " ";
  }
  s += "] decodes " + std::to_string(b.decodes.size());
  if (!b.decodes.empty()) {
    int lo = 1 << 30, hi = 0;
    for (const auto& d : b.decodes) {
      lo = std::min(lo, d.context_len());
      hi = std::max(hi, d.context_len());
    }
    s += " ctx " + std::to_string(lo) + ".." + std::to_string(hi);
  }
  return s;
}

// One batch on the GPU: cache, inputs, buffers, and POD / serial runs.
class PodRun {
 public:
  PodRun(const AttentionDims& dims, KvLayout layout, const HybridBatch& batch,
         const PodOptions& options, std::mt19937_64& rng)
      : dims_(dims),
        batch_(batch),
        cache_(dims, layout,
               std::max<int>(1, static_cast<int>(batch.prefills.size() + batch.decodes.size())),
               max_context(batch), rng) {
    stream_ = cuda::Stream::create().value();
    cache_.fill_cached(batch_, rng);
    const int tokens = batch_.num_tokens();
    in_.q = testing::random_values(
        static_cast<std::size_t>(tokens) * dims.num_q_heads * dims.head_dim, dims.dtype, rng);
    in_.k_new = testing::random_values(
        static_cast<std::size_t>(tokens) * dims.num_kv_heads * dims.head_dim, dims.dtype, rng);
    in_.v_new = testing::random_values(
        static_cast<std::size_t>(tokens) * dims.num_kv_heads * dims.head_dim, dims.dtype, rng);
    plan_.emplace(PodPlan::create(batch_, dims_, options).value());
    counters_ = PodCounters::create(stream_.get()).value();
    k_ = upload(cache_.k);
    v_ = upload(cache_.v);
    const AttentionPlan& ap = plan_->attention();
    metadata_ =
        cuda::DeviceBuffer::allocate(std::max<std::size_t>(ap.metadata_bytes(), 16)).value();
    workspace_ =
        cuda::DeviceBuffer::allocate(std::max<std::size_t>(ap.workspace_bytes(), 16)).value();
    buffers_ = {metadata_.data(), metadata_.bytes(), workspace_.data(), workspace_.bytes()};
    q_ = upload(in_.q);
    k_new_ = upload(in_.k_new);
    v_new_ = upload(in_.v_new);
    out_ = cuda::DeviceBuffer::allocate(std::max<std::size_t>(in_.q.size() * 2, 16)).value();
    EXPECT_TRUE(plan_->upload(buffers_, stream_.get()).ok());
    // Append the step's K/V once (both modes read the same cache).
    const Status appended = append_kv(ap, buffers_, view(k_new_, dims.num_kv_heads),
                                      view(v_new_, dims.num_kv_heads), kv(), stream_.get());
    EXPECT_TRUE(appended.ok()) << appended.to_string();
    const TensorView hk(in_.k_new.data(), dims.dtype, {tokens, dims.num_kv_heads, dims.head_dim});
    const TensorView hv(in_.v_new.data(), dims.dtype, {tokens, dims.num_kv_heads, dims.head_dim});
    const Status host_appended = reference_append_kv(
        batch_, dims, hk, hv, cache_.view(cache_.k.data(), cache_.v.data(), Device::cpu));
    EXPECT_TRUE(host_appended.ok()) << host_appended.to_string();
  }

  // A new plan for the same batch (sized within the first plan's buffers).
  void replan(const PodOptions& options) {
    auto plan = PodPlan::create(batch_, dims_, options);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    ASSERT_LE(plan->attention().metadata_bytes(), metadata_.bytes());
    ASSERT_LE(plan->attention().workspace_bytes(), workspace_.bytes());
    plan_.emplace(std::move(*plan));
    EXPECT_TRUE(plan_->upload(buffers_, stream_.get()).ok());
  }

  const PodPlan& plan() const { return *plan_; }
  const HybridBatch& batch() const { return batch_; }

  // The fused launch (mode pod) with poisoned out and workspace.
  std::vector<std::uint16_t> run_pod(const PodTrace& trace = {}, bool graph = false) {
    poison();
    auto launch = [&] {
      const Status s = pod(*plan_, buffers_, counters_, view(q_, dims_.num_q_heads), kv(),
                           view(out_, dims_.num_q_heads), scale(), stream_.get(), trace);
      EXPECT_TRUE(s.ok()) << s.to_string();
    };
    if (graph) {
      auto capture = cuda::GraphCapture::begin(stream_.get()).value();
      launch();
      cuda::GraphExec exec = capture.finish().value();
      for (int i = 0; i < 3; ++i) exec.launch(stream_.get());
    } else {
      launch();
    }
    return finish();
  }

  // The separate prefill and decode kernels on the same work lists. Against
  // a fused plan the prefill is the one-warpgroup wgmma tile that the fused
  // kernel embeds (not the warp-specialized kernel, whose 128-key blocks sum
  // in another order), so the two must agree bit for bit; a serial-fallback
  // plan runs the default kernels either way.
  std::vector<std::uint16_t> run_serial() {
    poison();
    KernelOptions kernels = plan_->attention().kernel_options();
    if (plan_->config().fused) kernels.ws_prefill = false;
    const AttentionPlan ap = plan_->attention().with_kernel_options(kernels);
    const auto q = view(q_, dims_.num_q_heads), out = view(out_, dims_.num_q_heads);
    const Status p = prefill(ap, buffers_, q, kv(), out, scale(), stream_.get());
    EXPECT_TRUE(p.ok()) << p.to_string();
    const Status d = decode(ap, buffers_, q, kv(), out, scale(), stream_.get());
    EXPECT_TRUE(d.ok()) << d.to_string();
    return finish();
  }

  bool counters_are_zero() const {
    std::vector<std::uint32_t> host(counters_.bytes() / 4);
    EXPECT_EQ(cudaMemcpy(host.data(), counters_.data(), counters_.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return std::all_of(host.begin(), host.end(), [](std::uint32_t x) { return x == 0; });
  }
  // The decode splits' arrival counters in the workspace (the kernel's merge
  // resets them; nothing else writes them between upload and this check).
  bool merge_counters_are_zero() const {
    const std::size_t n = plan_->attention().decode_counter_count();
    if (n == 0) return true;
    std::vector<std::int32_t> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), plan_->attention().pointers(buffers_).decode_counters, n * 4,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return std::all_of(host.begin(), host.end(), [](std::int32_t x) { return x == 0; });
  }

  // The fp64 and naive same-precision references of `rows` (computed once,
  // compared with several outputs).
  struct Reference {
    std::vector<int> rows;
    std::vector<float> exact, naive;
  };
  Reference reference(const std::vector<int>& rows) {
    const int tokens = batch_.num_tokens();
    const std::size_t n = static_cast<std::size_t>(tokens) * dims_.num_q_heads * dims_.head_dim;
    Reference r{rows, std::vector<float>(n), std::vector<float>(n)};
    const TensorView q(in_.q.data(), dims_.dtype, {tokens, dims_.num_q_heads, dims_.head_dim});
    for (auto [buf, precision] : {std::pair{&r.exact, ReferencePrecision::fp64},
                                  std::pair{&r.naive, ReferencePrecision::naive}}) {
      const TensorView o(buf->data(), DType::f32, {tokens, dims_.num_q_heads, dims_.head_dim});
      const Status s = reference_attention(
          batch_, dims_, q, cache_.view(cache_.k.data(), cache_.v.data(), Device::cpu), o, scale(),
          precision, ReferencePart::all, rows);
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    return r;
  }

  // Max |kernel - fp64| on the reference's rows and the tolerance: twice the
  // naive implementation's error plus FlashAttention-3's atol.
  struct Check {
    double err = 0, bound = 0;
    int worst_row = -1, worst_head = -1;
  };
  Check compare(const std::vector<std::uint16_t>& out, const Reference& ref) const {
    Check c;
    double naive_err = 0, atol = 0;
    const std::size_t row_elems = static_cast<std::size_t>(dims_.num_q_heads) * dims_.head_dim;
    for (int row : ref.rows) {
      for (std::size_t j = 0; j < row_elems; ++j) {
        const std::size_t i = row * row_elems + j;
        const double err = std::abs(to_float(dims_.dtype, out[i]) - ref.exact[i]);
        if (!(err <= c.err)) {
          c.err = std::isnan(err) ? INFINITY : err;
          c.worst_row = row;
          c.worst_head = static_cast<int>(j / dims_.head_dim);
        }
        naive_err = std::max<double>(naive_err, std::abs(ref.naive[i] - ref.exact[i]));
        const float noisy =
            round_to(dims_.dtype, round_to(dims_.dtype, ref.exact[i] + 0.3f) - 0.3f);
        atol = std::max<double>(atol, 2.0 * std::abs(noisy - ref.exact[i]));
      }
    }
    c.bound = 2 * naive_err + atol;
    return c;
  }

  int first_decode_row() const { return batch_.num_prefill_tokens(); }
  std::size_t row_elems() const {
    return static_cast<std::size_t>(dims_.num_q_heads) * dims_.head_dim;
  }
  DType dtype() const { return dims_.dtype; }
  const AttentionDims& dims() const { return dims_; }

 private:
  float scale() const { return 1.f / std::sqrt(static_cast<float>(dims_.head_dim)); }
  cuda::DeviceBuffer upload(const std::vector<std::uint16_t>& host) {
    cuda::DeviceBuffer b =
        cuda::DeviceBuffer::allocate(std::max<std::size_t>(host.size() * 2, 16)).value();
    if (!host.empty()) b.copy_from_host(host.data(), host.size() * 2);
    return b;
  }
  TensorView view(cuda::DeviceBuffer& b, int heads) {
    return TensorView(b.data(), dims_.dtype, {batch_.num_tokens(), heads, dims_.head_dim},
                      Device::cuda);
  }
  KvLayerView kv() { return cache_.view(k_.data(), v_.data(), Device::cuda); }
  void poison() {
    out_.fill_bytes(0xff, stream_.get());  // NaN in fp16 and bf16
    workspace_.fill_bytes(0xff, stream_.get());
    // Uploading the plan again rewrites what the kernels must find there
    // (metadata, and the separate decode kernel's split counters at zero).
    EXPECT_TRUE(plan_->upload(buffers_, stream_.get()).ok());
  }
  std::vector<std::uint16_t> finish() {
    // A watchdog instead of a plain synchronize: a launch that never finishes
    // (a scheduling bug would show up as one) fails loudly within a minute.
    const auto t0 = std::chrono::steady_clock::now();
    while (cudaStreamQuery(stream_.get()) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
        std::printf("[pod] TIMEOUT: the launch did not finish within 60 s\n");
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::uint16_t> host(in_.q.size());
    if (!host.empty()) out_.copy_to_host(host.data(), host.size() * 2);
    return host;
  }

  AttentionDims dims_;
  HybridBatch batch_;
  HostKvCache cache_;
  Inputs in_;
  std::optional<PodPlan> plan_;
  cuda::Stream stream_;
  PodCounters counters_;
  cuda::DeviceBuffer k_, v_, metadata_, workspace_, q_, k_new_, v_new_, out_;
  AttentionBuffers buffers_;
};

// Rows the CPU reference checks: a few per chunk (first, last, tile edges,
// random) and up to `max_decodes` decodes.
std::vector<int> sample_rows(const HybridBatch& batch, std::mt19937_64& rng, int per_chunk = 5,
                             int max_decodes = 6) {
  std::set<int> rows;
  for (const BatchSequence& s : batch.prefills) {
    std::set<int> pick = {0, s.num_new - 1};
    if (s.num_new > kPrefillBlockM) pick.insert({kPrefillBlockM - 1, kPrefillBlockM});
    std::uniform_int_distribution<int> any(0, s.num_new - 1);
    while (static_cast<int>(pick.size()) < std::min(per_chunk, s.num_new)) pick.insert(any(rng));
    for (int i : pick) rows.insert(s.token_offset + i);
  }
  std::vector<int> decodes;
  for (const BatchSequence& s : batch.decodes) decodes.push_back(s.token_offset);
  std::shuffle(decodes.begin(), decodes.end(), rng);
  if (!decodes.empty()) {  // the longest context is always checked
    auto longest = std::max_element(
        batch.decodes.begin(), batch.decodes.end(),
        [](const auto& a, const auto& b) { return a.context_len() < b.context_len(); });
    rows.insert(longest->token_offset);
  }
  for (int i = 0; i < std::min<int>(max_decodes, static_cast<int>(decodes.size())); ++i) {
    rows.insert(decodes[i]);
  }
  return {rows.begin(), rows.end()};
}

// The checks of one batch; returns false (with diagnostics) on any failure.
bool check_batch(PodRun& run, std::mt19937_64& rng, const std::string& label) {
  const PodConfig& cfg = run.plan().config();
  const std::vector<std::uint16_t> fused = run.run_pod();
  const bool zero = run.counters_are_zero();
  const bool merge_zero = run.merge_counters_are_zero();
  const std::vector<std::uint16_t> serial = run.run_serial();
  bool ok = true;
  auto fail = [&](const std::string& what) {
    ok = false;
    ADD_FAILURE() << label << ": " << what << "\n  batch: " << describe(run.batch())
                  << "\n  plan: " << cfg.reason;
  };
  if (!zero) fail("scheduling counters are not zero after the launch");
  if (!merge_zero) fail("decode merge counters are not zero after the launch");
  for (std::size_t i = 0; i < fused.size(); ++i) {
    if (!std::isfinite(to_float(run.dtype(), fused[i]))) {
      fail("POD output element " + std::to_string(i) + " (row " +
           std::to_string(i / run.row_elems()) + ") is not finite");
      return false;
    }
  }
  // POD vs the separate kernels on every row.
  const std::size_t decode_begin =
      static_cast<std::size_t>(run.first_decode_row()) * run.row_elems();
  std::size_t prefill_diff = 0, decode_diff = 0;
  double decode_max = 0;
  int decode_worst = -1;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    if (fused[i] == serial[i]) continue;
    if (i < decode_begin) {
      ++prefill_diff;
    } else {
      ++decode_diff;
      const double d = std::abs(to_float(run.dtype(), fused[i]) - to_float(run.dtype(), serial[i]));
      if (!(d <= decode_max)) {
        decode_max = std::isnan(d) ? INFINITY : d;
        decode_worst = static_cast<int>(i / run.row_elems());
      }
    }
  }
  // The separate prefill kernel runs the wgmma tile where POD's default does.
  const bool same_prefill_tile = cfg.wgmma_prefill == device_for(run.dims()).wgmma_prefill;
  if (same_prefill_tile && prefill_diff > 0) {
    fail(std::to_string(prefill_diff) + " prefill elements differ from the prefill kernel's");
  }
  if (decode_diff > 0) {
    fail(std::to_string(decode_diff) + " decode elements differ from the decode kernel's (max " +
         std::to_string(decode_max) + " at row " + std::to_string(decode_worst) + ")");
  }
  // Both against the CPU reference on sampled rows.
  std::vector<int> rows = sample_rows(run.batch(), rng);
  if (decode_worst >= 0) rows.push_back(decode_worst);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const PodRun::Reference ref = run.reference(rows);
  const PodRun::Check c = run.compare(fused, ref);
  const PodRun::Check cs = run.compare(serial, ref);
  if (!(c.err <= c.bound)) {
    fail("POD vs fp64 reference: max err " + std::to_string(c.err) + " > bound " +
         std::to_string(c.bound) + " at row " + std::to_string(c.worst_row) + " head " +
         std::to_string(c.worst_head) + " (serial err " + std::to_string(cs.err) + ")");
  }
  std::printf(
      "[pod] %-40s %s grid %5d (%4d prefill, %4d decode CTAs, splits %d/%d) err %.2e <= "
      "%.2e decode diff %.1e\n",
      label.c_str(), cfg.wgmma_prefill ? "wgmma" : "mma", cfg.grid, cfg.prefill_ctas,
      cfg.decode_ctas, cfg.prefill_splits, cfg.decode_splits, c.err, c.bound, decode_max);
  return ok;
}

PodOptions options_for(const AttentionDims& dims, PodRatio ratio = PodRatio::proportional) {
  PodOptions o;
  o.device = device_for(dims);
  o.ratio = ratio;
  o.choose_ratio = false;     // the test's ratio
  o.serial_fallback = false;  // the fused kernel (SerialFallbackRunsTheSerialKernels: the fallback)
  return o;
}

std::string label_of(const char* what, const AttentionDims& d, KvLayout layout) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %s d%d %d/%d %s", what, dtype_name(d.dtype).data(), d.head_dim,
                d.num_q_heads, d.num_kv_heads, testing::layout_name(layout));
  return buf;
}

TEST(PodGpuTest, DeviceConfigurationFromOccupancy) {
  VPOD_REQUIRE_GPU();
  EXPECT_TRUE(kUnbuffered);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  for (DType dt : {DType::f16, DType::bf16}) {
    for (int d : {64, 128}) {
      const AttentionDims dims{32, 8, d, dt};
      for (bool allow_wgmma : {true, false}) {
        const PodDevice& dev = device_for(dims, allow_wgmma);
        std::printf("[pod] %s d%d %s prefill tile: %d SMs, CTAs per SM %d\n", dtype_name(dt).data(),
                    d, dev.wgmma_prefill ? "wgmma" : "mma.sync", dev.num_sms, dev.ctas_per_sm);
        EXPECT_GE(dev.ctas_per_sm, 1);
        if (!allow_wgmma) EXPECT_FALSE(dev.wgmma_prefill);
        // The H200 build carries sm_90a code (VPOD_CUDA_ARCHS=90a): there POD
        // must run the wgmma tile, as the standalone prefill does.
        if (allow_wgmma && prop.major == 9) EXPECT_TRUE(dev.wgmma_prefill);
      }
    }
  }
  auto stream = cuda::Stream::create().value();
  auto counters = PodCounters::create(stream.get());
  ASSERT_TRUE(counters.ok()) << counters.status().to_string();
  std::printf("[pod] %%nsmid counters: %d\n", counters->num_sm_counters());
  EXPECT_GE(counters->num_sm_counters(), device_for({32, 8, 128, DType::f16}).num_sms);
}

// >= 200 random hybrid batches: dtypes, head dims, GQA groups (1..20), both
// vAttention layouts (a paged cache runs FlashInfer's kernels, never POD), ratio policies, 1 or 2
// decode tiles per CTA, planner or forced splits, and planned SM counts that force splits.
TEST(PodGpuTest, RandomHybridBatchesMatchSeparateKernelsAndReference) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("random sweep");
  const std::vector<std::pair<int, int>> heads = {{8, 8},  {8, 2}, {16, 2}, {12, 4},
                                                  {32, 4}, {8, 1}, {40, 2}, {32, 8}};
  const KvLayout layouts[] = {KvLayout::per_layer, KvLayout::all_layers};
  constexpr int kBatches = 200;
  int failures = 0;
  for (int b = 0; b < kBatches; ++b) {
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    const auto [hq, hkv] = heads[pick(static_cast<int>(heads.size()))];
    const AttentionDims dims{hq, hkv, pick(2) ? 128 : 64, pick(2) ? DType::f16 : DType::bf16};
    const KvLayout layout = layouts[pick(3)];
    const int n_prefill = pick(4);
    const int n_decode = (n_prefill == 0 ? 1 : 0) + pick(33);
    std::vector<SeqSpec> prefills;
    for (int i = 0; i < n_prefill; ++i) {
      prefills.push_back({pick(3) == 0 ? 0 : pick(900), 1 + pick(pick(2) ? 300 : 20)});
    }
    std::vector<int> decodes;
    for (int i = 0; i < n_decode; ++i) decodes.push_back(1 + pick(pick(4) == 0 ? 64 : 1100));
    const HybridBatch batch = make_batch(prefills, decodes);
    PodOptions options = options_for(dims, pick(2) ? PodRatio::even : PodRatio::proportional);
    if (pick(3) == 0) options.device.num_sms = 4 + pick(28);  // small plans: splits
    if (pick(4) == 0) options.prefill_splits = 1 + pick(3);
    if (pick(4) == 0) options.decode_splits = 1 + pick(4);
    PodRun run(dims, layout, batch, options, rng);
    const std::string label = "sweep " + std::to_string(b) + " " + label_of("", dims, layout) +
                              " " + pod_ratio_name(options.ratio);
    if (!check_batch(run, rng, label)) ++failures;
    if (failures >= 5) {
      ADD_FAILURE() << "stopping after 5 failing batches";
      break;
    }
  }
  EXPECT_EQ(failures, 0);
}

struct EdgeCase {
  const char* name;
  std::vector<SeqSpec> prefills;
  std::vector<int> decodes;
};

TEST(PodGpuTest, EdgeCases) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("edge cases");
  std::vector<int> many(512);
  for (int i = 0; i < 512; ++i) many[i] = 1 + (i * 37) % 300;
  const std::vector<EdgeCase> cases = {
      {"no decodes", {{300, 200}, {0, 129}}, {}},
      {"no prefill", {}, {1, 64, 65, 1000, 2049}},
      {"one decode", {}, {777}},
      {"one decode + chunk", {{100, 50}}, {4000}},
      {"512 decodes", {{64, 256}}, many},
      {"512 decodes only", {}, many},
      {"1-token chunk", {{1000, 1}}, {5, 500}},
      {"1-token chunk, no cache", {{0, 1}}, {}},
      {"very different chunks", {{0, 1}, {3000, 700}, {17, 3}, {0, 1500}, {2500, 37}}, {300, 3000}},
  };
  struct Config {
    AttentionDims dims;
    PodRatio ratio;
    KvLayout layout;
  };
  const Config configs[] = {
      {{32, 8, 128, DType::f16}, PodRatio::proportional, KvLayout::per_layer},
      {{8, 1, 64, DType::bf16}, PodRatio::even, KvLayout::all_layers},
      {{16, 2, 128, DType::bf16}, PodRatio::proportional, KvLayout::all_layers},
  };
  for (const EdgeCase& c : cases) {
    for (const Config& cfg : configs) {
      const HybridBatch batch = make_batch(c.prefills, c.decodes);
      PodRun run(cfg.dims, cfg.layout, batch, options_for(cfg.dims, cfg.ratio), rng);
      check_batch(run, rng,
                  std::string(c.name) + " " + label_of("", cfg.dims, cfg.layout) + " " +
                      pod_ratio_name(cfg.ratio));
    }
  }
}

// POD with the mma.sync prefill tile where the default is the wgmma one (the
// sm_80 path, and KernelOptions::wgmma_prefill = false): prefill rows against the CPU
// reference, decode rows bit for bit against the decode kernel.
TEST(PodGpuTest, MmaPrefillTileMatchesReference) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("mma prefill tile");
  int failures = 0;
  for (int b = 0; b < 24; ++b) {
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    const AttentionDims dims{b % 3 == 0 ? 8 : 32, b % 3 == 0 ? 8 : 4 << pick(2), pick(2) ? 128 : 64,
                             pick(2) ? DType::f16 : DType::bf16};
    const KvLayout layout = b % 2 ? KvLayout::all_layers : KvLayout::per_layer;
    std::vector<SeqSpec> prefills = {{pick(700), 1 + pick(400)}};
    if (pick(2)) prefills.push_back({pick(200), 1 + pick(40)});
    std::vector<int> decodes;
    for (int i = pick(20); i > 0; --i) decodes.push_back(1 + pick(1500));
    PodOptions options;
    options.device = device_for(dims, /*allow_wgmma=*/false);
    options.ratio = pick(2) ? PodRatio::even : PodRatio::proportional;
    options.choose_ratio = false;
    options.serial_fallback = false;
    if (pick(3) == 0) options.device.num_sms = 4 + pick(12);
    PodRun run(dims, layout, make_batch(prefills, decodes), options, rng);
    ASSERT_FALSE(run.plan().config().wgmma_prefill);
    if (!check_batch(run, rng,
                     "mma tile " + std::to_string(b) + " " + label_of("", dims, layout))) {
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0);
}

// Small enough for compute-sanitizer (memcheck, racecheck, synccheck).
TEST(PodGpuTest, SmallBatchForSanitizer) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("small");
  const AttentionDims dims{8, 2, 128, DType::f16};
  const HybridBatch batch = make_batch({{70, 130}, {0, 3}}, {1, 100, 300});
  PodOptions options = options_for(dims);
  options.decode_splits = 2;  // one split decode: the combine path too
  PodRun run(dims, KvLayout::all_layers, batch, options, rng);
  EXPECT_TRUE(check_batch(run, rng, label_of("small", dims, KvLayout::all_layers)));
}

// The serial fallback (the planner's choice where the fused kernel's
// estimate does not beat the serial kernels', e.g. a batch of one kind):
// pod() runs prefill() then decode() on attention.h's own plan, so the output
// is the separate kernels' bit for bit, and the fused kernel's counters stay
// zero. Also the fluid planner's own choices (ratio, fallback) on random
// hybrid batches, checked like the sweep.
TEST(PodGpuTest, SerialFallbackAndPlannerChoices) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("fallback");
  const AttentionDims dims{32, 8, 128, DType::bf16};
  for (const HybridBatch& batch :
       {make_batch({}, std::vector<int>(24, 2000)), make_batch({{0, 200}}, {})}) {
    PodOptions options = options_for(dims);
    options.serial_fallback = true;
    PodRun run(dims, KvLayout::all_layers, batch, options, rng);
    EXPECT_FALSE(run.plan().config().fused) << run.plan().config().reason;
    EXPECT_EQ(run.plan().config().grid, 0);
    EXPECT_TRUE(check_batch(run, rng, "fallback " + describe(batch)));
  }
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  int fused = 0;
  // Small batches: the fp64 reference of 32 heads dominates the test's time
  // (on the H200, 2026-11-30 14:37 UTC, 3 batches ~4x this size took ~35 s).
  for (int b = 0; b < 8; ++b) {
    const HybridBatch batch =
        make_batch({{pick(1200), 1 + pick(300)}}, std::vector<int>(1 + pick(24), 1 + pick(2500)));
    PodOptions options = options_for(dims);
    options.serial_fallback = true;
    options.choose_ratio = true;
    PodRun run(dims, pick(2) ? KvLayout::all_layers : KvLayout::per_layer, batch, options, rng);
    fused += run.plan().config().fused;
    EXPECT_TRUE(check_batch(run, rng, "planner choice " + std::to_string(b)));
  }
  std::printf("[pod] planner choices: %d of 8 hybrid batches fused\n", fused);
}

TEST(PodGpuTest, EmptyBatchLaunchesNothing) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  const AttentionDims dims{8, 2, 128, DType::f16};
  PodRun run(dims, KvLayout::per_layer, make_batch({}, {}), options_for(dims), rng);
  EXPECT_EQ(run.plan().config().grid, 0);
  EXPECT_TRUE(run.run_pod().empty());
  EXPECT_TRUE(run.counters_are_zero());
}

// A CUDA graph of the launch replayed three times: the counters reset
// themselves, so every replay schedules correctly and ends at zero.
TEST(PodGpuTest, GraphReplayEqualsDirectLaunch) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("graph");
  const AttentionDims dims{32, 8, 128, DType::f16};
  const HybridBatch batch = make_batch({{700, 300}, {0, 64}}, std::vector<int>(48, 900));
  PodRun run(dims, KvLayout::all_layers, batch, options_for(dims), rng);
  const auto direct = run.run_pod();
  const auto replayed = run.run_pod({}, /*graph=*/true);
  EXPECT_TRUE(direct == replayed) << "graph replay differs";
  EXPECT_TRUE(run.counters_are_zero());
}

// The same batch twice: alone, and while a concurrent kernel holds half of
// the SMs (and with the other ratio policy). Tiles land on other SMs and in
// another order; the outputs must be identical bit for bit.
TEST(PodGpuTest, PlacementDoesNotChangeTheOutput) {
  VPOD_REQUIRE_GPU();
  std::mt19937_64 rng = fresh_rng("placement");
  const AttentionDims dims{32, 8, 128, DType::f16};
  const HybridBatch batch = make_batch({{500, 400}}, std::vector<int>(64, 1000));
  PodRun run(dims, KvLayout::per_layer, batch, options_for(dims), rng);
  const int grid = run.plan().config().grid;
  cuda::DeviceBuffer trace_a = cuda::DeviceBuffer::allocate(grid * 12).value();
  cuda::DeviceBuffer trace_b = cuda::DeviceBuffer::allocate(grid * 12).value();
  const auto alone = run.run_pod({trace_a.as<std::int32_t>(), grid});

  const int sms = device_for(dims).num_sms;
  const int hold = sms / 2;
  int* started = nullptr;
  ASSERT_EQ(cudaHostAlloc(&started, sizeof(int), cudaHostAllocMapped), cudaSuccess);
  *started = 0;
  int* started_dev = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&started_dev, started, 0), cudaSuccess);
  auto side = cuda::Stream::create().value();
  // Leaves less than one POD CTA's shared memory of the SM's 228 KB (this
  // 128-dim kernel takes ~65 KB with either prefill tile).
  const int hold_smem = 200 * 1024;
  ASSERT_EQ(cudaFuncSetAttribute(occupy_sms_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 hold_smem),
            cudaSuccess);
  occupy_sms_kernel<<<hold, 32, hold_smem, side.get()>>>(200ull * 1000 * 1000, started_dev);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  while (reinterpret_cast<volatile int*>(started)[0] < hold &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::yield();
  }
  const int resident = reinterpret_cast<volatile int*>(started)[0];
  const auto crowded = run.run_pod({trace_b.as<std::int32_t>(), grid});
  ASSERT_EQ(cudaStreamSynchronize(side.get()), cudaSuccess);
  cudaFreeHost(started);
  EXPECT_EQ(resident, hold) << "the occupying kernel did not become resident";

  std::vector<std::int32_t> ta(3 * grid), tb(3 * grid);
  trace_a.copy_to_host(ta.data(), ta.size() * 4);
  trace_b.copy_to_host(tb.data(), tb.size() * 4);
  // Where each (kind, unit) ran in each launch.
  std::map<std::pair<int, int>, int> sm_a, sm_b;
  std::set<int> used_a, used_b;
  for (int i = 0; i < grid; ++i) {
    ASSERT_GE(ta[3 * i], 0) << "CTA " << i << " got no unit";
    ASSERT_GE(tb[3 * i], 0) << "CTA " << i << " got no unit";
    sm_a[{ta[3 * i], ta[3 * i + 1]}] = ta[3 * i + 2];
    sm_b[{tb[3 * i], tb[3 * i + 1]}] = tb[3 * i + 2];
    used_a.insert(ta[3 * i + 2]);
    used_b.insert(tb[3 * i + 2]);
  }
  EXPECT_EQ(static_cast<int>(sm_a.size()), grid) << "a unit ran twice (alone)";
  EXPECT_EQ(static_cast<int>(sm_b.size()), grid) << "a unit ran twice (crowded)";
  int moved = 0;
  for (const auto& [unit, sm] : sm_a) moved += sm_b[unit] != sm;
  std::printf("[pod] placement: grid %d, SMs used alone %zu, crowded %zu, units moved %d\n", grid,
              used_a.size(), used_b.size(), moved);
  EXPECT_GT(moved, grid / 4) << "the concurrent kernel did not change the placement";
  EXPECT_LT(used_b.size(), used_a.size());
  EXPECT_TRUE(alone == crowded) << "POD output depends on SM placement";
  EXPECT_TRUE(run.counters_are_zero());

  // The other ratio policy schedules the kinds differently; same result
  // (with the same splits: the planner's choice may depend on the policy).
  PodOptions even = options_for(dims, PodRatio::even);
  even.prefill_splits = run.plan().config().prefill_splits;
  even.decode_splits = run.plan().config().decode_splits;
  run.replan(even);
  EXPECT_TRUE(run.run_pod() == alone) << "POD output depends on the ratio policy";
}

}  // namespace
}  // namespace vpod::attention
