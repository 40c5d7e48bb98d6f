// The device-side random fill of attention_bench_fill.h: a counter-based
// hash per element, written in place on the GPU.
#include "bench/attention_bench_fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_check.h"
#include "common/splitmix64.h"

namespace vpod::bench {
namespace {

__global__ void fill_random_kernel(std::uint16_t* data, std::size_t n, std::uint64_t seed,
                                   bool bf16) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    // SplitMix64 of the index: a counter-based stream.
    const std::uint64_t z =
        splitmix64_finalize(seed * 0xD1B54A32D192ED03ull + i * kSplitMix64Gamma);
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float x = (2.f * u - 1.f) * 1.7320508f;
    if (bf16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(x);
      data[i] = *reinterpret_cast<const std::uint16_t*>(&b);
    } else {
      const __half h = __float2half_rn(x);
      data[i] = *reinterpret_cast<const std::uint16_t*>(&h);
    }
  }
}

__global__ void __launch_bounds__(512)
    read_kernel(const uint4* data, std::size_t n, unsigned* sink) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride),
                c = __ldcs(data + i + 2 * stride), d = __ldcs(data + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u && threadIdx.x == 0x1ffu) *sink = acc;
}

}  // namespace

void read_bandwidth_device(const void* data, std::size_t bytes, int ctas, unsigned* sink,
                           cudaStream_t stream) {
  read_kernel<<<ctas, 512, 0, stream>>>(static_cast<const uint4*>(data), bytes / 16, sink);
  VPOD_CUDA_CHECK_LAUNCH();
}

void fill_random_device(void* data, std::size_t count, std::uint64_t seed, bool bf16,
                        cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  constexpr int kCtas = 4096;
  fill_random_kernel<<<kCtas, kThreads, 0, stream>>>(static_cast<std::uint16_t*>(data), count, seed,
                                                     bf16);
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::bench
