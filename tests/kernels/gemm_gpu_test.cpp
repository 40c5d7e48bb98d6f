// cuBLASLt GEMMs (loaded at run time) against gemm_ref: every dtype, with
// bias, fp32 logits output from bf16 inputs, strided rows, M = 1 (decode).
#include <gtest/gtest.h>

#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemm.h"
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

}  // namespace
}  // namespace vpod::kernels
