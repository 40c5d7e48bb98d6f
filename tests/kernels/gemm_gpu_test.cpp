// cuBLASLt GEMMs (loaded at run time) against gemm_ref: every dtype, with
// bias, fp32 logits output from bf16 inputs, strided rows, M = 1 (decode).
#include <gtest/gtest.h>

#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
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

}  // namespace
}  // namespace vpod::kernels
