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
__global__ void silu_mul_kernel(const __grid_constant__ SiluMulParams p) {
  const std::int64_t total = static_cast<std::int64_t>(p.rows) * p.inter;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = idx / p.inter;
    const std::int64_t i = idx % p.inter;
    const T* in = static_cast<const T*>(p.gate_up) + r * p.in_stride;
    const float g = to_float(in[i]);
    const float u = to_float(in[i + p.inter]);
    static_cast<T*>(p.out)[r * p.out_stride + i] = from_float<T>(g / (1.0f + __expf(-g)) * u);
  }
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
  constexpr std::int64_t kMaxBlocks = 132 * 16;  // a few waves on an H100/H200
  const std::int64_t blocks =
      std::min<std::int64_t>(kMaxBlocks, (out.numel() + kThreads - 1) / kThreads);
  VPOD_DISPATCH_DTYPE(out.dtype(), T, {
    silu_mul_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  });
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::kernels
