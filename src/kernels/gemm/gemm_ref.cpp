// The CPU reference GEMM (gemm.h), in fp32, with the output columns spread over
// threads for large N.

#include <algorithm>
#include <thread>
#include <vector>

#include "kernels/gemm/gemm.h"

namespace vpod::kernels {

namespace {

// Four output rows at a time share each weight row read: the weight matrix
// (vocab x hidden for the logits) dominates the traffic.
void gemm_columns(const float* x, std::int64_t x_stride, const float* w, std::int64_t w_stride,
                  const float* bias, float* out, std::int64_t out_stride, int m, int k, int n_begin,
                  int n_end) {
  constexpr int kRowBlock = 4;
  for (int m0 = 0; m0 < m; m0 += kRowBlock) {
    const int rows = std::min(kRowBlock, m - m0);
    for (int j = n_begin; j < n_end; ++j) {
      const float* wj = w + static_cast<std::int64_t>(j) * w_stride;
      float acc[kRowBlock] = {0, 0, 0, 0};
      for (int r = 0; r < rows; ++r) {
        const float* xr = x + static_cast<std::int64_t>(m0 + r) * x_stride;
        float a = 0.0f;
        for (int i = 0; i < k; ++i) a += xr[i] * wj[i];
        acc[r] = a;
      }
      for (int r = 0; r < rows; ++r) {
        out[static_cast<std::int64_t>(m0 + r) * out_stride + j] =
            acc[r] + (bias != nullptr ? bias[j] : 0.0f);
      }
    }
  }
}

}  // namespace

void gemm_ref(const float* x, std::int64_t x_stride, const float* w, std::int64_t w_stride,
              const float* bias, float* out, std::int64_t out_stride, int m, int n, int k,
              int num_threads) {
  const int threads = std::max(1, std::min(num_threads, n / 256));
  if (threads <= 1) {
    gemm_columns(x, x_stride, w, w_stride, bias, out, out_stride, m, k, 0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int per = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int begin = t * per;
    const int end = std::min(n, begin + per);
    if (begin >= end) break;
    pool.emplace_back(gemm_columns, x, x_stride, w, w_stride, bias, out, out_stride, m, k, begin,
                      end);
  }
  for (auto& th : pool) th.join();
}

}  // namespace vpod::kernels
