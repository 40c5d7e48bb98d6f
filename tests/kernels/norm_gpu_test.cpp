// RMSNorm kernels (plain, fused residual add, per head) against the CPU
// references, in every dtype, with poisoned outputs.
#include <gtest/gtest.h>

#include "kernels/norm/rms_norm.h"
#include "model_ops_gpu_support.h"
#include "support/gpu.h"

namespace vpod::kernels {
namespace {

using namespace testing;

TEST(RmsNormGpu, MatchesReference) {
  VPOD_REQUIRE_GPU();
  const int rows = 37, dim = 4096 + 64;
  const float eps = 1e-5f;
  for (DType dt : kAllDtypes) {
    const auto x = round_to(random_vector(rows * dim, 1, -3, 3), dt);
    const auto w = round_to(random_vector(dim, 2, 0.5f, 1.5f), dt);
    std::vector<float> want(x.size());
    rms_norm_ref(x.data(), dim, w.data(), eps, want.data(), dim, rows, dim);
    auto dx = to_device(x, dt);
    auto dw = to_device(w, dt);
    auto dout = poisoned(x.size(), dt);
    rms_norm_gpu(TensorView(dx.data(), dt, {rows, dim}, Device::cuda),
                 TensorView(dw.data(), dt, {dim}, Device::cuda), eps,
                 TensorView(dout.data(), dt, {rows, dim}, Device::cuda), nullptr);
    expect_close(to_host(dout, x.size(), dt), round_to(want, dt), dt, "rms_norm");
  }
}

TEST(RmsNormGpu, FusedResidualAddMatchesUnfused) {
  VPOD_REQUIRE_GPU();
  const int rows = 19, dim = 1000;
  const float eps = 1e-6f;
  for (DType dt : kAllDtypes) {
    const auto res = round_to(random_vector(rows * dim, 3, -2, 2), dt);
    const auto delta = round_to(random_vector(rows * dim, 4, -2, 2), dt);
    const auto w = round_to(random_vector(dim, 5, 0.5f, 1.5f), dt);
    // Unfused: residual + delta rounded to dt (the stored residual), then norm.
    std::vector<float> sum(res.size());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = res[i] + delta[i];
    sum = round_to(sum, dt);
    std::vector<float> want(sum.size());
    rms_norm_ref(sum.data(), dim, w.data(), eps, want.data(), dim, rows, dim);
    auto dres = to_device(res, dt);
    auto ddelta = to_device(delta, dt);
    auto dw = to_device(w, dt);
    auto dout = poisoned(res.size(), dt);
    add_rms_norm_gpu(TensorView(dres.data(), dt, {rows, dim}, Device::cuda),
                     TensorView(ddelta.data(), dt, {rows, dim}, Device::cuda),
                     TensorView(dw.data(), dt, {dim}, Device::cuda), eps,
                     TensorView(dout.data(), dt, {rows, dim}, Device::cuda), nullptr);
    expect_close(to_host(dres, res.size(), dt), sum, dt, "add_rms_norm residual");
    expect_close(to_host(dout, res.size(), dt), round_to(want, dt), dt, "add_rms_norm out");
  }
}

TEST(RmsNormGpu, PerHeadNormInStridedRows) {
  VPOD_REQUIRE_GPU();
  // q heads inside a fused qkv row: [rows, heads, 128] at row stride 3072.
  const int rows = 11, heads = 16, head_dim = 128, row_stride = 3072;
  const float eps = 1e-6f;
  for (DType dt : kAllDtypes) {
    const auto x = round_to(random_vector(rows * row_stride, 6, -3, 3), dt);
    const auto w = round_to(random_vector(head_dim, 7, 0.5f, 1.5f), dt);
    std::vector<float> want = x;
    for (int r = 0; r < rows; ++r) {
      rms_norm_ref(want.data() + r * row_stride, head_dim, w.data(), eps,
                   want.data() + r * row_stride, head_dim, heads, head_dim);
    }
    auto dx = to_device(x, dt);
    auto dw = to_device(w, dt);
    head_rms_norm_gpu(
        TensorView(dx.data(), dt, {rows, heads, head_dim}, {row_stride, head_dim, 1}, Device::cuda),
        TensorView(dw.data(), dt, {head_dim}, Device::cuda), eps, nullptr);
    // Columns past the q heads must be untouched.
    expect_close(to_host(dx, x.size(), dt), round_to(want, dt), dt, "head_rms_norm");
  }
}

}  // namespace
}  // namespace vpod::kernels
