// The skinny-GEMM (GEMV) kernel for decode steps and its launchers (gemv.h),
// including the fused RMSNorm prologue and SiLU*mul epilogue of gemv_norm_gpu.

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dtype_dispatch.cuh"
#include "kernels/gemm/gemv.h"
#include "kernels/norm/rms_norm_device.cuh"
#include "kernels/pdl.cuh"

namespace vpod::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kElemsPerChunk = 8;  // 16 bytes of f16/bf16
// 16-byte chunks each lane has in flight before it multiplies: 4 KB per warp,
// enough outstanding loads to cover HBM latency with a wave of warps per SM.
constexpr int kUnroll = 8;
// SiLU*mul form: warps [0, 4) compute gate columns i, warps [4, 8) the up
// columns I + i of the same i.
constexpr int kSiluCols = kWarpsPerBlock / 2;

struct GemvParams {
  const void* x;     // [M, K] at x_stride (plain form)
  const void* w;     // [N, K] at w_stride ([2N, K] for SiLU*mul)
  const void* bias;  // [N] in out's dtype, or null
  void* out;         // [M, N] at out_stride
  std::int64_t x_stride, w_stride, out_stride;
  int n, k;
  bool out_f32;   // out (and bias) are f32, else the input dtype
  bool prefetch;  // launched with PDL: prefetch the first weights before the wait
                  // (the norm form always does)
  bool early_trigger;
  // Norm prologue (gemv.h GemvNormInput).
  const void* residual;
  const void* delta;
  const void* norm_weight;
  void* residual_out;
  std::int64_t residual_stride, delta_stride, residual_out_stride;
  const std::int32_t* rows;
  float eps;
};

// Streaming load that does not allocate in L1 (w is read exactly once).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
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

// The normalized input rows in shared memory: x[m] = rms_norm(h[m]) with
// h[m] = residual[r] (+ delta[r]); CTA 0 also stores h[m] to residual_out.
template <typename T, int kRows>
__device__ __forceinline__ void norm_prologue(const GemvParams& p, T* xs) {
  for (int m = 0; m < kRows; ++m) {
    const std::int64_t r = p.rows != nullptr ? p.rows[m] : m;
    const T* res = static_cast<const T*>(p.residual) + r * p.residual_stride;
    const T* d = p.delta != nullptr ? static_cast<const T*>(p.delta) + r * p.delta_stride : nullptr;
    T* out_res = p.residual_out != nullptr && blockIdx.x == 0
                     ? static_cast<T*>(p.residual_out) + m * p.residual_out_stride
                     : nullptr;
    T* x = xs + static_cast<std::int64_t>(m) * p.k;
    const float sum = rms_pass1<T>(res, d, x, out_res, p.k);
    rms_pass2<T>(x, static_cast<const T*>(p.norm_weight), sum, p.eps, x, p.k);
  }
  __syncthreads();
}

template <typename T, int kRows, bool kNorm, bool kSilu>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ uint4 smem_x[];  // kNorm: [kRows, K] normalized rows
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int n = 0;
  bool active = false;
  if constexpr (kSilu) {
    const int i = blockIdx.x * kSiluCols + warp % kSiluCols;
    active = i < p.n;
    n = warp < kSiluCols ? i : p.n + i;
  } else {
    n = blockIdx.x * kWarpsPerBlock + warp;
    active = n < p.n;
  }
  const auto* w_row =
      static_cast<const uint4*>(p.w) + (active ? n : 0) * (p.w_stride / kElemsPerChunk);
  const int chunks = p.k / kElemsPerChunk;
  // The first batch of weight lines depends on no earlier kernel: prefetch
  // it into L2 before waiting for the previous kernel (programmatic
  // dependent launch; without it the wait returns at once) and before the
  // norm prologue, so the prologue overlaps the weights' DRAM latency.
  if ((kNorm || p.prefetch) && active) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (lane + 32 * u < chunks) prefetch_l2(w_row + lane + 32 * u);
    }
  }
  if (p.early_trigger) pdl_trigger();
  pdl_wait();
  if constexpr (kNorm) norm_prologue<T, kRows>(p, reinterpret_cast<T*>(smem_x));
  auto x_chunk = [&](int m, int idx) -> uint4 {
    if constexpr (kNorm) {
      return smem_x[m * chunks + idx];
    } else {
      return __ldg(static_cast<const uint4*>(p.x) + m * (p.x_stride / kElemsPerChunk) + idx);
    }
  };

  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  if (active) {
    int c = lane;
    // Main loop: kUnroll loads in flight per lane, then the FMAs.
    for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(w_row + c + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int m = 0; m < kRows; ++m) acc[m] += dot8<T>(wv[u], x_chunk(m, c + 32 * u));
      }
    }
    for (; c < chunks; c += 32) {
      const uint4 w1 = load_stream(w_row + c);
#pragma unroll
      for (int m = 0; m < kRows; ++m) acc[m] += dot8<T>(w1, x_chunk(m, c));
    }
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1)
        acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
  }
  if (!p.early_trigger) pdl_trigger();

  if constexpr (kSilu) {
    // gate and up rounded to the dtype (as the gate_up tensor would hold
    // them), then silu_mul_gpu's arithmetic.
    __shared__ float gu[kWarpsPerBlock][kRows];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) gu[warp][m] = to_float(from_float<T>(acc[m]));
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < kSiluCols * kRows) {
      const int j = t % kSiluCols;
      const int m = t / kSiluCols;
      const int i = blockIdx.x * kSiluCols + j;
      if (i < p.n) {
        const float g = gu[j][m];
        const float u = gu[kSiluCols + j][m];
        static_cast<T*>(p.out)[m * p.out_stride + i] = from_float<T>(g / (1.0f + __expf(-g)) * u);
      }
    }
  } else {
    if (!active || lane != 0) return;
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
}

// Launches gemv_kernel<T, m, kNorm, kSilu> for m = 1..kMaxGemvRows.
template <bool kNorm, bool kSilu>
void launch_gemv(const GemvParams& p, DType dtype, int m, unsigned blocks, std::size_t smem,
                 cudaStream_t stream, LaunchOptions launch) {
  auto go = [&](auto tag) {
    using T = decltype(tag);
    auto* kernel = m == 1   ? &gemv_kernel<T, 1, kNorm, kSilu>
                   : m == 2 ? &gemv_kernel<T, 2, kNorm, kSilu>
                   : m == 3 ? &gemv_kernel<T, 3, kNorm, kSilu>
                            : &gemv_kernel<T, 4, kNorm, kSilu>;
    VPOD_CUDA_CHECK(
        launch_kernel(kernel, dim3(blocks), dim3(kThreads), smem, stream, launch.pdl, p));
  };
  if (dtype == DType::bf16) {
    go(__nv_bfloat16{});
  } else {
    go(__half{});
  }
}

bool matrix_ok(const TensorView& t, DType dtype) {
  return t.data() != nullptr && t.rank() == 2 && t.dtype() == dtype && t.stride(1) == 1 &&
         t.stride(0) % kElemsPerChunk == 0 && aligned16(t.data());
}

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
              const TensorView& out, cudaStream_t stream, LaunchOptions launch) {
  VPOD_CHECK_MSG(gemv_supported(x, w, bias, out), "gemv_gpu operands: x " + x.to_string() + ", w " +
                                                      w.to_string() + ", out " + out.to_string());
  GemvParams p{};
  p.x = x.data();
  p.w = w.data();
  p.bias = bias != nullptr ? bias->data() : nullptr;
  p.out = out.data();
  p.x_stride = x.stride(0);
  p.w_stride = w.stride(0);
  p.out_stride = out.stride(0);
  p.n = static_cast<int>(w.size(0));
  p.k = static_cast<int>(x.size(1));
  p.out_f32 = out.dtype() == DType::f32;
  p.prefetch = launch.pdl;
  p.early_trigger = launch.pdl_early_trigger;
  const unsigned blocks = static_cast<unsigned>((p.n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_gemv<false, false>(p, x.dtype(), static_cast<int>(x.size(0)), blocks, 0, stream, launch);
}

bool gemv_norm_supported(const GemvNormInput& in, const TensorView& w, const TensorView* bias,
                         const TensorView& out, bool silu_mul) {
  const DType dt = w.dtype();
  if (dt != DType::f16 && dt != DType::bf16) return false;
  const int m = in.num_rows;
  if (m < 1 || m > kMaxGemvRows || w.rank() != 2 || out.rank() != 2 || out.size(0) != m) {
    return false;
  }
  const std::int64_t k = w.size(1);
  if (k % kElemsPerChunk != 0 || k > (std::int64_t{1} << 30) ||
      static_cast<std::int64_t>(m) * k * static_cast<std::int64_t>(dtype_size(dt)) >
          kGemvNormMaxSmemBytes) {
    return false;
  }
  if (!matrix_ok(w, dt) || !matrix_ok(in.residual, dt) || in.residual.size(1) != k) return false;
  if (in.rows == nullptr && in.residual.size(0) < m) return false;
  if (in.delta.data() != nullptr && (!matrix_ok(in.delta, dt) || in.delta.size(1) != k ||
                                     (in.rows == nullptr && in.delta.size(0) < m))) {
    return false;
  }
  if (in.residual_out.data() != nullptr &&
      (!matrix_ok(in.residual_out, dt) || in.residual_out.size(1) != k ||
       in.residual_out.size(0) < m || in.residual_out.data() == in.residual.data() ||
       in.residual_out.data() == in.delta.data())) {
    return false;
  }
  if (in.weight.data() == nullptr || in.weight.numel() != k || in.weight.dtype() != dt ||
      !aligned16(in.weight.data()) || (in.weight.rank() == 1 && in.weight.stride(0) != 1)) {
    return false;
  }
  if (out.stride(1) != 1 || out.data() == nullptr) return false;
  if (silu_mul) {
    if (bias != nullptr || out.dtype() != dt || w.size(0) != 2 * out.size(1)) return false;
  } else {
    if (w.size(0) != out.size(1) || (out.dtype() != dt && out.dtype() != DType::f32)) return false;
    if (bias != nullptr && (bias->numel() != w.size(0) || bias->dtype() != out.dtype() ||
                            (bias->rank() == 1 && bias->stride(0) != 1))) {
      return false;
    }
  }
  return w.size(0) <= (std::int64_t{1} << 30);
}

void gemv_norm_gpu(const GemvNormInput& in, const TensorView& w, const TensorView* bias,
                   const TensorView& out, bool silu_mul, cudaStream_t stream,
                   LaunchOptions launch) {
  VPOD_CHECK_MSG(gemv_norm_supported(in, w, bias, out, silu_mul),
                 "gemv_norm_gpu operands: residual " + in.residual.to_string() + ", w " +
                     w.to_string() + ", out " + out.to_string());
  GemvParams p{};
  p.w = w.data();
  p.bias = bias != nullptr ? bias->data() : nullptr;
  p.out = out.data();
  p.w_stride = w.stride(0);
  p.out_stride = out.stride(0);
  p.n = static_cast<int>(silu_mul ? out.size(1) : w.size(0));
  p.k = static_cast<int>(w.size(1));
  p.out_f32 = out.dtype() == DType::f32;
  p.prefetch = launch.pdl;
  p.early_trigger = launch.pdl_early_trigger;
  p.residual = in.residual.data();
  p.residual_stride = in.residual.stride(0);
  p.delta = in.delta.data();
  p.delta_stride = in.delta.data() != nullptr ? in.delta.stride(0) : 0;
  p.norm_weight = in.weight.data();
  p.residual_out = in.residual_out.data();
  p.residual_out_stride = in.residual_out.data() != nullptr ? in.residual_out.stride(0) : 0;
  p.rows = in.rows;
  p.eps = in.eps;
  const int m = in.num_rows;
  const std::size_t smem = static_cast<std::size_t>(m) * p.k * dtype_size(w.dtype());
  const int cols_per_block = silu_mul ? kSiluCols : kWarpsPerBlock;
  const unsigned blocks = static_cast<unsigned>((p.n + cols_per_block - 1) / cols_per_block);
  if (silu_mul) {
    launch_gemv<true, true>(p, w.dtype(), m, blocks, smem, stream, launch);
  } else {
    launch_gemv<true, false>(p, w.dtype(), m, blocks, smem, stream, launch);
  }
}

}  // namespace vpod::kernels
