// RMSNorm kernels: one CTA per row (residual add fused), one warp per head
// for the per-head form. fp16/bf16 rows that are 16-byte aligned with
// dim % 8 == 0 go through rms_norm_device.cuh (16-byte chunks), the same
// arithmetic as the GEMV's fused norm prologue.
#include "common/cuda_check.h"
#include "kernels/dtype_dispatch.cuh"
#include "kernels/norm/rms_norm.h"
#include "kernels/norm/rms_norm_device.cuh"

namespace vpod::kernels {

namespace {

constexpr int kNormThreads = 256;

struct RmsNormParams {
  const void* x;       // [rows, dim] at x_stride (null for the fused form: reads residual)
  void* residual;      // [rows, dim] at residual_stride (fused form only)
  const void* delta;   // [rows, dim] at delta_stride (fused form only)
  const void* weight;  // [dim]
  void* out;           // [rows, dim] at out_stride
  std::int64_t x_stride, residual_stride, delta_stride, out_stride;
  int dim;
  float eps;
};

// 16-byte chunks (rms_norm_device.cuh).
template <typename T, bool kAddResidual>
__global__ void rms_norm_vec_kernel(const __grid_constant__ RmsNormParams p) {
  const std::int64_t row = blockIdx.x;
  T* out = static_cast<T*>(p.out) + row * p.out_stride;
  if constexpr (kAddResidual) {
    T* res = static_cast<T*>(p.residual) + row * p.residual_stride;
    const T* d = static_cast<const T*>(p.delta) + row * p.delta_stride;
    const float sum = rms_pass1<T>(res, d, res, nullptr, p.dim);
    rms_pass2<T>(res, static_cast<const T*>(p.weight), sum, p.eps, out, p.dim);
  } else {
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    const float sum = rms_pass1<T>(x, nullptr, nullptr, nullptr, p.dim);
    rms_pass2<T>(x, static_cast<const T*>(p.weight), sum, p.eps, out, p.dim);
  }
}

template <typename T, bool kAddResidual>
__global__ void rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
  const std::int64_t row = blockIdx.x;
  const T* w = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out) + row * p.out_stride;
  float sum = 0.0f;
  if constexpr (kAddResidual) {
    T* res = static_cast<T*>(p.residual) + row * p.residual_stride;
    const T* d = static_cast<const T*>(p.delta) + row * p.delta_stride;
    for (int i = threadIdx.x; i < p.dim; i += blockDim.x) {
      // The residual is stored in T; the norm reads the stored (rounded) value.
      const T r = from_float<T>(to_float(res[i]) + to_float(d[i]));
      res[i] = r;
      const float v = to_float(r);
      sum += v * v;
    }
  } else {
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    for (int i = threadIdx.x; i < p.dim; i += blockDim.x) {
      const float v = to_float(x[i]);
      sum += v * v;
    }
  }
  const float inv = rsqrtf(block_sum(sum) / static_cast<float>(p.dim) + p.eps);
  const T* src = kAddResidual ? static_cast<const T*>(p.residual) + row * p.residual_stride
                              : static_cast<const T*>(p.x) + row * p.x_stride;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) {
    out[i] = from_float<T>(to_float(src[i]) * inv * to_float(w[i]));
  }
}

struct HeadNormParams {
  void* x;  // [rows, heads, head_dim] at (row_stride, head_dim, 1)
  const void* weight;
  std::int64_t row_stride;
  int heads, head_dim, rows;
  float eps;
};

// One warp per (row, head).
template <typename T>
__global__ void head_rms_norm_kernel(const __grid_constant__ HeadNormParams p) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= p.rows * p.heads) return;
  const int row = warp / p.heads;
  const int head = warp % p.heads;
  T* x = static_cast<T*>(p.x) + row * p.row_stride + static_cast<std::int64_t>(head) * p.head_dim;
  const T* w = static_cast<const T*>(p.weight);
  float sum = 0.0f;
  for (int i = lane; i < p.head_dim; i += 32) {
    const float v = to_float(x[i]);
    sum += v * v;
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float inv = rsqrtf(sum / static_cast<float>(p.head_dim) + p.eps);
  for (int i = lane; i < p.head_dim; i += 32)
    x[i] = from_float<T>(to_float(x[i]) * inv * to_float(w[i]));
}

void check_norm_views(const TensorView& x, const TensorView& weight, const TensorView& out) {
  VPOD_CHECK_MSG(
      x.device() == Device::cuda && out.device() == Device::cuda && weight.device() == Device::cuda,
      "rms_norm_gpu needs device tensors");
  VPOD_CHECK_MSG(x.rank() == 2 && out.rank() == 2 && x.size(0) == out.size(0) &&
                     x.size(1) == out.size(1) && weight.numel() == x.size(1) && x.stride(1) == 1 &&
                     out.stride(1) == 1,
                 "rms_norm_gpu shapes: x " + x.to_string() + ", out " + out.to_string());
  VPOD_CHECK(x.dtype() == out.dtype() && weight.dtype() == x.dtype());
}

// Whether the 16-byte chunk kernel applies (fp16/bf16, aligned rows).
bool vectorizable(const RmsNormParams& p, DType dtype, bool add) {
  if (dtype == DType::f32 || p.dim % 8 != 0 || !aligned16(p.weight) || !aligned16(p.out) ||
      p.out_stride % 8 != 0) {
    return false;
  }
  if (add) {
    return aligned16(p.residual) && aligned16(p.delta) && p.residual_stride % 8 == 0 &&
           p.delta_stride % 8 == 0;
  }
  return aligned16(p.x) && p.x_stride % 8 == 0;
}

}  // namespace

void rms_norm_gpu(const TensorView& x, const TensorView& weight, float eps, const TensorView& out,
                  cudaStream_t stream) {
  check_norm_views(x, weight, out);
  if (x.size(0) == 0) return;
  RmsNormParams p{};
  p.x = x.data();
  p.weight = weight.data();
  p.out = out.data();
  p.x_stride = x.stride(0);
  p.out_stride = out.stride(0);
  p.dim = static_cast<int>(x.size(1));
  p.eps = eps;
  const bool vec = vectorizable(p, x.dtype(), false);
  VPOD_DISPATCH_DTYPE(x.dtype(), T, {
    if (vec) {
      rms_norm_vec_kernel<T, false>
          <<<static_cast<unsigned>(x.size(0)), kNormThreads, 0, stream>>>(p);
    } else {
      rms_norm_kernel<T, false><<<static_cast<unsigned>(x.size(0)), kNormThreads, 0, stream>>>(p);
    }
  });
  VPOD_CUDA_CHECK_LAUNCH();
}

void add_rms_norm_gpu(const TensorView& residual, const TensorView& delta, const TensorView& weight,
                      float eps, const TensorView& out, cudaStream_t stream) {
  check_norm_views(residual, weight, out);
  check_norm_views(delta, weight, out);
  if (residual.size(0) == 0) return;
  RmsNormParams p{};
  p.residual = residual.data();
  p.delta = delta.data();
  p.weight = weight.data();
  p.out = out.data();
  p.residual_stride = residual.stride(0);
  p.delta_stride = delta.stride(0);
  p.out_stride = out.stride(0);
  p.dim = static_cast<int>(residual.size(1));
  p.eps = eps;
  const bool vec = vectorizable(p, residual.dtype(), true);
  VPOD_DISPATCH_DTYPE(residual.dtype(), T, {
    if (vec) {
      rms_norm_vec_kernel<T, true>
          <<<static_cast<unsigned>(residual.size(0)), kNormThreads, 0, stream>>>(p);
    } else {
      rms_norm_kernel<T, true>
          <<<static_cast<unsigned>(residual.size(0)), kNormThreads, 0, stream>>>(p);
    }
  });
  VPOD_CUDA_CHECK_LAUNCH();
}

void head_rms_norm_gpu(const TensorView& x, const TensorView& weight, float eps,
                       cudaStream_t stream) {
  VPOD_CHECK_MSG(x.device() == Device::cuda && x.rank() == 3 && x.stride(2) == 1 &&
                     x.stride(1) == x.size(2) && weight.numel() == x.size(2) &&
                     weight.dtype() == x.dtype(),
                 "head_rms_norm_gpu shapes: " + x.to_string());
  const int rows = static_cast<int>(x.size(0));
  if (rows == 0) return;
  HeadNormParams p{};
  p.x = x.data();
  p.weight = weight.data();
  p.row_stride = x.stride(0);
  p.heads = static_cast<int>(x.size(1));
  p.head_dim = static_cast<int>(x.size(2));
  p.rows = rows;
  p.eps = eps;
  constexpr int kThreads = 256;  // 8 warps, one (row, head) each
  const int warps = rows * p.heads;
  const unsigned blocks = static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
  VPOD_DISPATCH_DTYPE(x.dtype(), T,
                      { head_rms_norm_kernel<T><<<blocks, kThreads, 0, stream>>>(p); });
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::kernels
