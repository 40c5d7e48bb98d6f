// SiLU*mul: 16-byte chunks (eight fp16/bf16 elements per load) on a 2D grid,
// x over a row's chunks and y over rows, when the rows are 16-byte aligned;
// element by element otherwise. Both compute g / (1 + exp(-g)) * u in fp32
// with __expf, as the GEMV's fused epilogue does (bitwise the same results).
#include "common/cuda_check.h"
#include "kernels/activation/silu_mul.h"
#include "kernels/dtype_dispatch.cuh"

namespace vpod::kernels {

namespace {

struct SiluMulParams {
  const void* gate_up;  // [rows, 2I] at in_stride
  void* out;            // [rows, I] at out_stride
  std::int64_t in_stride, out_stride;
  int rows, inter;
};

template <typename T>
__device__ __forceinline__ T silu_times(T gate, T up) {
  const float g = to_float(gate);
  return from_float<T>(g / (1.0f + __expf(-g)) * to_float(up));
}

template <typename T>
__global__ void silu_mul_kernel(const __grid_constant__ SiluMulParams p) {
  const std::int64_t total = static_cast<std::int64_t>(p.rows) * p.inter;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = idx / p.inter;
    const std::int64_t i = idx % p.inter;
    const T* in = static_cast<const T*>(p.gate_up) + r * p.in_stride;
    static_cast<T*>(p.out)[r * p.out_stride + i] = silu_times(in[i], in[i + p.inter]);
  }
}

template <typename T>
__global__ void silu_mul_vec_kernel(const __grid_constant__ SiluMulParams p) {
  const int chunks = p.inter / 8;
  for (int r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const auto* in =
        reinterpret_cast<const Chunk8<T>*>(static_cast<const T*>(p.gate_up) + r * p.in_stride);
    auto* out = reinterpret_cast<Chunk8<T>*>(static_cast<T*>(p.out) + r * p.out_stride);
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += gridDim.x * blockDim.x) {
      const Chunk8<T> g = in[c];
      const Chunk8<T> u = in[c + chunks];
      Chunk8<T> o;
#pragma unroll
      for (int j = 0; j < 8; ++j) o.v[j] = silu_times(g.v[j], u.v[j]);
      out[c] = o;
    }
  }
}

bool vectorizable(const SiluMulParams& p, DType dtype) {
  return dtype != DType::f32 && p.inter % 8 == 0 && p.in_stride % 8 == 0 && p.out_stride % 8 == 0 &&
         aligned16(p.gate_up) && aligned16(p.out);
}

}  // namespace

void silu_mul_gpu(const TensorView& gate_up, const TensorView& out, cudaStream_t stream) {
  VPOD_CHECK_MSG(gate_up.rank() == 2 && out.rank() == 2 && gate_up.size(0) == out.size(0) &&
                     gate_up.size(1) == 2 * out.size(1) && gate_up.stride(1) == 1 &&
                     out.stride(1) == 1 && gate_up.dtype() == out.dtype(),
                 "silu_mul_gpu shapes: " + gate_up.to_string() + " -> " + out.to_string());
  if (out.numel() == 0) return;
  SiluMulParams p{gate_up.data(),
                  out.data(),
                  gate_up.stride(0),
                  out.stride(0),
                  static_cast<int>(out.size(0)),
                  static_cast<int>(out.size(1))};
  constexpr int kThreads = 256;
  if (vectorizable(p, out.dtype())) {
    const int chunks = p.inter / 8;
    const dim3 grid(static_cast<unsigned>((chunks + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::min(p.rows, 65535)));
    VPOD_DISPATCH_DTYPE(out.dtype(), T,
                        { silu_mul_vec_kernel<T><<<grid, kThreads, 0, stream>>>(p); });
    VPOD_CUDA_CHECK_LAUNCH();
    return;
  }
  constexpr std::int64_t kMaxBlocks = 132 * 16;  // a few waves on an H100/H200
  const std::int64_t blocks =
      std::min<std::int64_t>(kMaxBlocks, (out.numel() + kThreads - 1) / kThreads);
  VPOD_DISPATCH_DTYPE(out.dtype(), T, {
    silu_mul_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  });
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::kernels
