// cuBLASLt GEMMs (loaded at run time) against gemm_ref: every dtype, with
// bias, fp32 logits output from bf16 inputs, strided rows, M = 1 (decode).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/activation/silu_mul.h"
#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
#include "kernels/norm/rms_norm.h"
#include "model_ops_gpu_support.h"
#include "support/gpu.h"

namespace vpod::kernels {
namespace {

using namespace testing;

void check_gemm(CublasLt& lt, DType in, DType out_dtype, int m, int n, int k, bool bias,
                int x_stride) {
  const auto x = round_to(random_vector(static_cast<std::size_t>(m) * x_stride, 11, -1, 1), in);
  const auto w = round_to(random_vector(static_cast<std::size_t>(n) * k, 12, -0.1f, 0.1f), in);
  const auto b = round_to(random_vector(n, 13, -1, 1), out_dtype);
  std::vector<float> want(static_cast<std::size_t>(m) * n);
  gemm_ref(x.data(), x_stride, w.data(), k, bias ? b.data() : nullptr, want.data(), n, m, n, k, 8);
  auto dx = to_device(x, in);
  auto dw = to_device(w, in);
  auto db = to_device(b, out_dtype);
  auto dout = poisoned(want.size(), out_dtype);
  const TensorView bias_view(db.data(), out_dtype, {n}, Device::cuda);
  const Status s =
      lt.gemm(TensorView(dx.data(), in, {m, k}, {x_stride, 1}, Device::cuda),
              TensorView(dw.data(), in, {n, k}, Device::cuda), bias ? &bias_view : nullptr,
              TensorView(dout.data(), out_dtype, {m, n}, Device::cuda), nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Accumulation over k terms of magnitude ~0.1: allow sqrt(k) roundings of
  // the inputs' dtype on top of the output's rounding.
  const std::vector<float> got = to_host(dout, want.size(), out_dtype);
  float max_err = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  const float tol = dtype_tolerance(out_dtype, 4.0f) + (in == DType::f32 ? 1e-4f : 2e-3f);
  EXPECT_LT(max_err, tol) << dtype_name(in) << "->" << dtype_name(out_dtype) << " m=" << m
                          << " n=" << n << " k=" << k << " bias=" << bias;
}

TEST(CublasLtGpu, MatchesReference) {
  VPOD_REQUIRE_GPU();
  auto lt = CublasLt::create();
  ASSERT_TRUE(lt.ok()) << lt.status().to_string();
  std::printf("cuBLASLt from %s\n", (*lt)->library_path().c_str());
  for (DType dt : kAllDtypes) {
    check_gemm(**lt, dt, dt, 1, 3072, 1024, false, 1024);         // decode GEMV
    check_gemm(**lt, dt, dt, 77, 1536, 1024, true, 1024);         // qkv with bias
    check_gemm(**lt, dt, dt, 64, 1024, 2816, false, 3000);        // strided rows
    check_gemm(**lt, dt, DType::f32, 5, 32000, 512, false, 512);  // logits in fp32
  }
}

// The decode GEMV (gemv.h) against gemm_ref: M = 1..4, f16/bf16, bias, fp32
// logits, strided x, a K that is not a multiple of the unrolled chunk
// (8 lanes x 8 chunks x 32), and the Llama-3-8B down_proj K.
TEST(GemvGpu, MatchesReference) {
  VPOD_REQUIRE_GPU();
  struct Case {
    int m, n, k, x_stride;
    bool bias;
    bool f32_out;
  };
  const Case cases[] = {{1, 3072, 1024, 1024, false, false}, {2, 1536, 1032, 1040, true, false},
                        {3, 1000, 2816, 2816, false, false}, {4, 777, 14336, 14336, true, false},
                        {1, 32000, 512, 512, false, true},   {4, 5000, 520, 528, true, true}};
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      const DType out_dtype = c.f32_out ? DType::f32 : dt;
      const auto x = round_to(random_vector(static_cast<std::size_t>(c.m) * c.x_stride, 21), dt);
      const auto w =
          round_to(random_vector(static_cast<std::size_t>(c.n) * c.k, 22, -0.1f, 0.1f), dt);
      const auto b = round_to(random_vector(c.n, 23), out_dtype);
      std::vector<float> want(static_cast<std::size_t>(c.m) * c.n);
      gemm_ref(x.data(), c.x_stride, w.data(), c.k, c.bias ? b.data() : nullptr, want.data(), c.n,
               c.m, c.n, c.k, 8);
      auto dx = to_device(x, dt);
      auto dw = to_device(w, dt);
      auto db = to_device(b, out_dtype);
      auto dout = poisoned(want.size(), out_dtype);
      const TensorView xv(dx.data(), dt, {c.m, c.k}, {c.x_stride, 1}, Device::cuda);
      const TensorView wv(dw.data(), dt, {c.n, c.k}, Device::cuda);
      const TensorView bv(db.data(), out_dtype, {c.n}, Device::cuda);
      const TensorView ov(dout.data(), out_dtype, {c.m, c.n}, Device::cuda);
      ASSERT_TRUE(gemv_supported(xv, wv, c.bias ? &bv : nullptr, ov));
      gemv_gpu(xv, wv, c.bias ? &bv : nullptr, ov, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> got = to_host(dout, want.size(), out_dtype);
      float max_err = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        max_err = std::max(max_err, std::fabs(got[i] - want[i]));
      EXPECT_LT(max_err, dtype_tolerance(out_dtype, 4.0f) + 2e-3f)
          << dtype_name(dt) << " m=" << c.m << " n=" << c.n << " k=" << c.k;
    }
  }
  // What it refuses: M above the limit, f32, misaligned K.
  auto d = to_device(std::vector<float>(64 * 64, 0.5f), DType::bf16);
  const TensorView w(d.data(), DType::bf16, {8, 64}, Device::cuda);
  EXPECT_FALSE(gemv_supported(
      TensorView(d.data(), DType::bf16, {kMaxGemvRows + 1, 64}, Device::cuda), w, nullptr,
      TensorView(d.data(), DType::bf16, {kMaxGemvRows + 1, 8}, Device::cuda)));
  EXPECT_FALSE(gemv_supported(TensorView(d.data(), DType::bf16, {1, 60}, Device::cuda),
                              TensorView(d.data(), DType::bf16, {8, 60}, Device::cuda), nullptr,
                              TensorView(d.data(), DType::bf16, {1, 8}, Device::cuda)));
}

// The GEMV's fused prologue (residual add + RMSNorm, rows gathered through
// an index array, the sum written to residual_out) and its SiLU*mul epilogue
// give bitwise what the separate kernels give (add_rms_norm_gpu /
// rms_norm_gpu, gemv_gpu, silu_mul_gpu), with plain and programmatic
// dependent launches.
TEST(GemvNormGpu, FusedMatchesSeparateKernelsBitwise) {
  VPOD_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);  // ordered with the legacy stream's fills
  constexpr int kR = kMaxGemvRows;                    // residual rows
  const LaunchOptions launches[] = {{}, {.pdl = true}, {.pdl = true, .pdl_early_trigger = true}};
  struct Shape {
    int n, k;
  };
  int checked = 0;
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const Shape sh : {Shape{1000, 1024}, Shape{522, 4096}}) {
      const int n = sh.n, k = sh.k;
      const auto residual =
          round_to(random_vector(static_cast<std::size_t>(kR) * k, 31, -2, 2), dt);
      const auto delta = round_to(random_vector(static_cast<std::size_t>(kR) * k, 32), dt);
      const auto norm_w = round_to(random_vector(k, 33, 0.5f, 1.5f), dt);
      const auto w =
          round_to(random_vector(static_cast<std::size_t>(2 * n) * k, 34, -0.1f, 0.1f), dt);
      const auto bias = round_to(random_vector(n, 35), dt);
      auto d_res = to_device(residual, dt);
      auto d_delta = to_device(delta, dt);
      auto d_nw = to_device(norm_w, dt);
      auto d_w = to_device(w, dt);
      auto d_bias = to_device(bias, dt);
      const TensorView res_v(d_res.data(), dt, {kR, k}, Device::cuda);
      const TensorView delta_v(d_delta.data(), dt, {kR, k}, Device::cuda);
      const TensorView nw_v(d_nw.data(), dt, {k}, Device::cuda);
      const TensorView w_v(d_w.data(), dt, {n, k}, Device::cuda);         // plain: first n rows
      const TensorView gu_w_v(d_w.data(), dt, {2 * n, k}, Device::cuda);  // gate/up
      const TensorView bias_v(d_bias.data(), dt, {n}, Device::cuda);
      const std::vector<std::int32_t> reversed = {3, 2, 1, 0};
      auto d_rows = cuda::DeviceBuffer::allocate(sizeof(std::int32_t) * kR);
      ASSERT_TRUE(d_rows.ok());
      d_rows->copy_from_host(reversed.data(), sizeof(std::int32_t) * kR);
      for (bool add : {false, true}) {
        // Separate kernels over all kR rows.
        auto sum = to_device(residual, dt);  // residual + delta after add_rms_norm
        auto hidden = poisoned(static_cast<std::size_t>(kR) * k, dt);
        const TensorView sum_v(sum.data(), dt, {kR, k}, Device::cuda);
        const TensorView hidden_v(hidden.data(), dt, {kR, k}, Device::cuda);
        if (add) {
          add_rms_norm_gpu(sum_v, delta_v, nw_v, 1e-5f, hidden_v, stream);
        } else {
          rms_norm_gpu(sum_v, nw_v, 1e-5f, hidden_v, stream);
        }
        auto ref = poisoned(static_cast<std::size_t>(kR) * n, dt);
        const TensorView ref_v(ref.data(), dt, {kR, n}, Device::cuda);
        gemv_gpu(hidden_v, w_v, add ? &bias_v : nullptr, ref_v, stream);
        auto gu = poisoned(static_cast<std::size_t>(kR) * 2 * n, dt);
        const TensorView gu_v(gu.data(), dt, {kR, 2 * n}, Device::cuda);
        gemv_gpu(hidden_v, gu_w_v, nullptr, gu_v, stream);
        auto act_ref = poisoned(static_cast<std::size_t>(kR) * n, dt);
        silu_mul_gpu(gu_v, TensorView(act_ref.data(), dt, {kR, n}, Device::cuda), stream);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const auto want_out = to_host(ref, static_cast<std::size_t>(kR) * n, dt);
        const auto want_act = to_host(act_ref, static_cast<std::size_t>(kR) * n, dt);
        const auto want_sum = to_host(sum, static_cast<std::size_t>(kR) * k, dt);
        for (int m = 1; m <= kR; ++m) {
          for (bool gather : {false, true}) {
            for (const LaunchOptions& launch : launches) {
              GemvNormInput in;
              in.residual = res_v;
              if (add) in.delta = delta_v;
              in.weight = nw_v;
              in.eps = 1e-5f;
              auto rout = poisoned(static_cast<std::size_t>(m) * k, dt);
              if (add) in.residual_out = TensorView(rout.data(), dt, {m, k}, Device::cuda);
              in.rows = gather ? d_rows->as<std::int32_t>() : nullptr;
              in.num_rows = m;
              auto out = poisoned(static_cast<std::size_t>(m) * n, dt);
              auto act = poisoned(static_cast<std::size_t>(m) * n, dt);
              const TensorView out_v(out.data(), dt, {m, n}, Device::cuda);
              const TensorView act_v(act.data(), dt, {m, n}, Device::cuda);
              ASSERT_TRUE(gemv_norm_supported(in, w_v, add ? &bias_v : nullptr, out_v, false));
              ASSERT_TRUE(gemv_norm_supported(in, gu_w_v, nullptr, act_v, true));
              gemv_norm_gpu(in, w_v, add ? &bias_v : nullptr, out_v, false, stream, launch);
              gemv_norm_gpu(in, gu_w_v, nullptr, act_v, true, stream, launch);
              ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
              const auto got_out = to_host(out, static_cast<std::size_t>(m) * n, dt);
              const auto got_act = to_host(act, static_cast<std::size_t>(m) * n, dt);
              const auto got_sum = to_host(rout, static_cast<std::size_t>(m) * k, dt);
              for (int i = 0; i < m; ++i) {
                const int r = gather ? reversed[i] : i;
                const std::string what =
                    std::string(dtype_name(dt)) + " n=" + std::to_string(n) +
                    " k=" + std::to_string(k) + " m=" + std::to_string(m) + " row " +
                    std::to_string(i) + " add=" + std::to_string(add) +
                    " gather=" + std::to_string(gather) + " pdl=" + std::to_string(launch.pdl) +
                    std::to_string(launch.pdl_early_trigger);
                ASSERT_TRUE(std::equal(got_out.begin() + i * n, got_out.begin() + (i + 1) * n,
                                       want_out.begin() + r * n))
                    << "GEMV output differs: " << what;
                ASSERT_TRUE(std::equal(got_act.begin() + i * n, got_act.begin() + (i + 1) * n,
                                       want_act.begin() + r * n))
                    << "SiLU*mul output differs: " << what;
                if (add) {
                  ASSERT_TRUE(std::equal(got_sum.begin() + i * k, got_sum.begin() + (i + 1) * k,
                                         want_sum.begin() + r * k))
                      << "residual_out differs: " << what;
                }
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  std::printf("fused GEMV: %d rows bitwise equal to the separate kernels\n", checked);
  // What it refuses: rows above the limit, a residual_out aliasing the
  // residual, a prologue beyond the shared-memory limit.
  auto d = to_device(std::vector<float>(8 * 8192, 0.5f), DType::bf16);
  GemvNormInput in;
  in.residual = TensorView(d.data(), DType::bf16, {kMaxGemvRows + 1, 64}, Device::cuda);
  in.weight = TensorView(d.data(), DType::bf16, {64}, Device::cuda);
  in.num_rows = kMaxGemvRows + 1;
  const TensorView w64(d.data(), DType::bf16, {8, 64}, Device::cuda);
  EXPECT_FALSE(gemv_norm_supported(
      in, w64, nullptr, TensorView(d.data(), DType::bf16, {kMaxGemvRows + 1, 8}, Device::cuda),
      false));
  in.num_rows = 1;
  EXPECT_TRUE(gemv_norm_supported(in, w64, nullptr,
                                  TensorView(d.data(), DType::bf16, {1, 8}, Device::cuda), false));
  in.residual_out = in.residual;
  EXPECT_FALSE(gemv_norm_supported(in, w64, nullptr,
                                   TensorView(d.data(), DType::bf16, {1, 8}, Device::cuda), false));
  GemvNormInput big;
  big.residual = TensorView(d.data(), DType::bf16, {4, 8192}, Device::cuda);
  big.weight = TensorView(d.data(), DType::bf16, {8192}, Device::cuda);
  big.num_rows = 4;  // 4 x 8192 x 2 bytes = 64 KB of prologue
  EXPECT_FALSE(gemv_norm_supported(big, TensorView(d.data(), DType::bf16, {2, 8192}, Device::cuda),
                                   nullptr, TensorView(d.data(), DType::bf16, {4, 2}, Device::cuda),
                                   false));
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace vpod::kernels
