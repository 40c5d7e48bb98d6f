#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dtype_dispatch.cuh"
#include "kernels/gemm/gemv.h"

namespace vpod::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kElemsPerChunk = 8;  // 16 bytes of f16/bf16
// 16-byte chunks each lane has in flight before it multiplies: 4 KB per warp,
// enough outstanding loads to cover HBM latency with a wave of warps per SM.
constexpr int kUnroll = 8;

struct GemvParams {
  const void* x;     // [M, K] at x_stride
  const void* w;     // [N, K] at w_stride
  const void* bias;  // [N] in out's dtype, or null
  void* out;         // [M, N] at out_stride
  std::int64_t x_stride, w_stride, out_stride;
  int n, k;
  bool out_f32;  // out (and bias) are f32, else the input dtype
};

// Streaming load that does not allocate in L1 (w is read exactly once).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <typename T>
__device__ __forceinline__ float2 pair_to_float2(std::uint32_t bits);
template <>
__device__ __forceinline__ float2 pair_to_float2<__half>(std::uint32_t bits) {
  __half2 h;
  memcpy(&h, &bits, sizeof(h));
  return __half22float2(h);
}
template <>
__device__ __forceinline__ float2 pair_to_float2<__nv_bfloat16>(std::uint32_t bits) {
  __nv_bfloat162 h;
  memcpy(&h, &bits, sizeof(h));
  return __bfloat1622float2(h);
}

template <typename T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const std::uint32_t av[4] = {a.x, a.y, a.z, a.w};
  const std::uint32_t bv[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = pair_to_float2<T>(av[i]);
    const float2 fb = pair_to_float2<T>(bv[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= p.n) return;
  const auto* w_row = static_cast<const uint4*>(p.w) + n * (p.w_stride / kElemsPerChunk);
  const int chunks = p.k / kElemsPerChunk;
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;

  int c = lane;
  // Main loop: kUnroll loads in flight per lane, then the FMAs.
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(w_row + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const auto* x_row = static_cast<const uint4*>(p.x) + m * (p.x_stride / kElemsPerChunk);
        acc[m] += dot8<T>(wv[u], __ldg(x_row + c + 32 * u));
      }
    }
  }
  for (; c < chunks; c += 32) {
    const uint4 wv = load_stream(w_row + c);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const auto* x_row = static_cast<const uint4*>(p.x) + m * (p.x_stride / kElemsPerChunk);
      acc[m] += dot8<T>(wv, __ldg(x_row + c));
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
  }
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (p.out_f32) {
      float v = acc[m];
      if (p.bias != nullptr) v += static_cast<const float*>(p.bias)[n];
      static_cast<float*>(p.out)[m * p.out_stride + n] = v;
    } else {
      float v = acc[m];
      if (p.bias != nullptr) v += to_float(static_cast<const T*>(p.bias)[n]);
      static_cast<T*>(p.out)[m * p.out_stride + n] = from_float<T>(v);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool gemv_supported(const TensorView& x, const TensorView& w, const TensorView* bias,
                    const TensorView& out) {
  if (x.rank() != 2 || w.rank() != 2 || out.rank() != 2) return false;
  const std::int64_t m = x.size(0), n = w.size(0), k = x.size(1);
  if (m < 1 || m > kMaxGemvRows || w.size(1) != k || out.size(0) != m || out.size(1) != n) {
    return false;
  }
  if (x.dtype() != w.dtype() || (x.dtype() != DType::f16 && x.dtype() != DType::bf16)) {
    return false;
  }
  if (out.dtype() != x.dtype() && out.dtype() != DType::f32) return false;
  if (bias != nullptr && (bias->numel() != n || bias->dtype() != out.dtype() ||
                          (bias->rank() == 1 && bias->stride(0) != 1))) {
    return false;
  }
  if (x.stride(1) != 1 || w.stride(1) != 1 || out.stride(1) != 1) return false;
  if (k % kElemsPerChunk != 0 || x.stride(0) % kElemsPerChunk != 0 ||
      w.stride(0) % kElemsPerChunk != 0) {
    return false;
  }
  return aligned16(x.data()) && aligned16(w.data()) && n <= (std::int64_t{1} << 30) &&
         k <= (std::int64_t{1} << 30);
}

void gemv_gpu(const TensorView& x, const TensorView& w, const TensorView* bias,
              const TensorView& out, cudaStream_t stream) {
  VPOD_CHECK_MSG(gemv_supported(x, w, bias, out), "gemv_gpu operands: x " + x.to_string() + ", w " +
                                                      w.to_string() + ", out " + out.to_string());
  GemvParams p{x.data(),
               w.data(),
               bias != nullptr ? bias->data() : nullptr,
               out.data(),
               x.stride(0),
               w.stride(0),
               out.stride(0),
               static_cast<int>(w.size(0)),
               static_cast<int>(x.size(1)),
               out.dtype() == DType::f32};
  const int m = static_cast<int>(x.size(0));
  const unsigned blocks = static_cast<unsigned>((p.n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    switch (m) {
      case 1: gemv_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(p); break;
      case 2: gemv_kernel<T, 2><<<blocks, kThreads, 0, stream>>>(p); break;
      case 3: gemv_kernel<T, 3><<<blocks, kThreads, 0, stream>>>(p); break;
      default: gemv_kernel<T, 4><<<blocks, kThreads, 0, stream>>>(p); break;
    }
  };
  if (x.dtype() == DType::bf16) {
    launch(__nv_bfloat16{});
  } else {
    launch(__half{});
  }
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::kernels
