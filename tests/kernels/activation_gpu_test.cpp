// SiLU*mul and the row gathers (embedding lookup, logit rows) against their
// CPU references.
#include <gtest/gtest.h>

#include "kernels/activation/silu_mul.h"
#include "kernels/embedding/embedding.h"
#include "model_ops_gpu_support.h"
#include "support/gpu.h"

namespace vpod::kernels {
namespace {

using namespace testing;

TEST(SiluMulGpu, MatchesReference) {
  VPOD_REQUIRE_GPU();
  // 14336: the 16-byte chunk kernel for fp16/bf16; 1003: element by element.
  const int rows = 29;
  for (const int inter : {14336, 1003})
    for (DType dt : kAllDtypes) {
      const auto gu =
          round_to(random_vector(static_cast<std::size_t>(rows) * 2 * inter, 21, -6, 6), dt);
      std::vector<float> want(static_cast<std::size_t>(rows) * inter);
      silu_mul_ref(gu.data(), 2 * inter, want.data(), inter, rows, inter);
      auto dgu = to_device(gu, dt);
      auto dout = poisoned(want.size(), dt);
      silu_mul_gpu(TensorView(dgu.data(), dt, {rows, 2 * inter}, Device::cuda),
                   TensorView(dout.data(), dt, {rows, inter}, Device::cuda), nullptr);
      expect_close(to_host(dout, want.size(), dt), round_to(want, dt), dt,
                   ("silu_mul, inter " + std::to_string(inter)).c_str());
    }
}

TEST(GatherRowsGpu, MatchesReferenceAndZeroesBadIds) {
  VPOD_REQUIRE_GPU();
  const int vocab = 1000, dim = 4096, n = 9;
  std::vector<std::int32_t> ids = {0, 999, 5, 5, 123, 777, 1, 998, 42};
  for (DType dt : kAllDtypes) {
    const auto table = round_to(random_vector(static_cast<std::size_t>(vocab) * dim, 22), dt);
    std::vector<float> want(static_cast<std::size_t>(n) * dim);
    gather_rows_ref(table.data(), dim, vocab, ids.data(), n, dim, want.data(), dim);
    auto dtable = to_device(table, dt);
    cuda::DeviceBuffer dids = cuda::DeviceBuffer::allocate(n * sizeof(std::int32_t)).value();
    dids.copy_from_host(ids.data(), n * sizeof(std::int32_t));
    auto dout = poisoned(want.size(), dt);
    gather_rows_gpu(TensorView(dtable.data(), dt, {vocab, dim}, Device::cuda),
                    dids.as<std::int32_t>(), n, TensorView(dout.data(), dt, {n, dim}, Device::cuda),
                    nullptr);
    expect_close(to_host(dout, want.size(), dt), want, dt, "gather_rows");
    // An out-of-range id writes zeros instead of reading out of bounds.
    std::vector<std::int32_t> bad = {vocab, -1};
    dids.copy_from_host(bad.data(), 2 * sizeof(std::int32_t));
    auto dbad = poisoned(2 * dim, dt);
    gather_rows_gpu(TensorView(dtable.data(), dt, {vocab, dim}, Device::cuda),
                    dids.as<std::int32_t>(), 2, TensorView(dbad.data(), dt, {2, dim}, Device::cuda),
                    nullptr);
    for (float v : to_host(dbad, 2 * dim, dt)) ASSERT_EQ(v, 0.0f);
  }
}

}  // namespace
}  // namespace vpod::kernels
