// The heads decode kernel (decode_heads_tile.cuh), fp16 and bf16: one CTA per
// (decode item, kDecodeHeadsPerCta units), in its own translation unit; and
// its cluster-merged variant (sm_90).
#include "cuda/per_device_once.h"
#include "kernels/attention/attention_kernels.cuh"

namespace vpod::attention {
namespace device {
namespace {

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kDecodeCtasPerSm)
    decode_heads_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  const DecodeWorkItem item = params.plan.decode_items[blockIdx.y];
  DecodeHeadsTile<T, kHeadDim>::run(params, item, static_cast<int>(blockIdx.x) * kDecodeHeadsPerCta,
                                    smem, static_cast<int>(threadIdx.x));
}

// The splits of one decode as a cluster of CTAs (cluster dims (1, S, 1) over
// the plan's grouped items), merged through distributed shared memory (sm_90).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kDecodeCtasPerSm)
    decode_heads_cluster_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  const DecodeWorkItem item = params.plan.decode_items[blockIdx.y];
  DecodeHeadsTile<T, kHeadDim>::template run<true>(
      params, item, static_cast<int>(blockIdx.x) * kDecodeHeadsPerCta, smem,
      static_cast<int>(threadIdx.x));
}

template <typename T, int kHeadDim>
Status prepare() {
  for (auto* kernel :
       {decode_heads_kernel<T, kHeadDim>, decode_heads_cluster_kernel<T, kHeadDim>}) {
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             DecodeHeadsTile<T, kHeadDim>::kSmemBytes),
        StatusCode::internal);
  }
  return Status();
}

// Whether this device runs the cluster kernel's sm_90 code.
template <typename T, int kHeadDim>
bool cluster_supported() {
  static const bool ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, decode_heads_cluster_kernel<T, kHeadDim>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion >= 90;
  }();
  return ok;
}

template <typename T>
Result<bool> heads_cluster_supported_typed(int head_dim) {
  bool ok = false;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, { ok = cluster_supported<T, kHeadDim>(); });
  return ok;
}

template <typename T>
Status heads_cluster_launch_typed(const AttentionParams& params, int head_dim, int cluster_size,
                                  cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    VPOD_RETURN_IF_ERROR((cuda::prepare_on_current_device<&prepare<T, kHeadDim>>()));
    const int units = params.num_kv_heads * params.decode_head_chunks;
    cudaLaunchConfig_t config{};
    config.gridDim =
        dim3(static_cast<unsigned>((units + kDecodeHeadsPerCta - 1) / kDecodeHeadsPerCta),
             static_cast<unsigned>(params.num_decode_items));
    config.blockDim = dim3(kAttentionThreads);
    config.dynamicSmemBytes = DecodeHeadsTile<T, kHeadDim>::kSmemBytes;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 1;
    attribute[0].val.clusterDim.y = static_cast<unsigned>(cluster_size);
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaLaunchKernelEx(&config, decode_heads_cluster_kernel<T, kHeadDim>, params),
        StatusCode::internal);
  });
  return Status();
}

template <typename T>
Status heads_launch_typed(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    VPOD_RETURN_IF_ERROR((cuda::prepare_on_current_device<&prepare<T, kHeadDim>>()));
    const int units = params.num_kv_heads * params.decode_head_chunks;
    const dim3 grid(static_cast<unsigned>((units + kDecodeHeadsPerCta - 1) / kDecodeHeadsPerCta),
                    static_cast<unsigned>(params.num_decode_items));
    decode_heads_kernel<T, kHeadDim>
        <<<grid, kAttentionThreads, DecodeHeadsTile<T, kHeadDim>::kSmemBytes, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Result<int> heads_ctas_per_sm_typed(int head_dim) {
  int ctas = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    VPOD_RETURN_IF_ERROR((prepare<T, kHeadDim>()));
    VPOD_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                  &ctas, decode_heads_kernel<T, kHeadDim>, kAttentionThreads,
                                  DecodeHeadsTile<T, kHeadDim>::kSmemBytes),
                              StatusCode::internal);
  });
  return ctas;
}

}  // namespace
}  // namespace device

namespace detail {

Status launch_decode_heads(const AttentionParams& params, DType dtype, int head_dim,
                           cudaStream_t stream) {
  return dtype == DType::f16 ? device::heads_launch_typed<half>(params, head_dim, stream)
                             : device::heads_launch_typed<__nv_bfloat16>(params, head_dim, stream);
}

bool decode_heads_cluster_supported(DType dtype, int head_dim) {
  const Result<bool> ok = dtype == DType::f16
                              ? device::heads_cluster_supported_typed<half>(head_dim)
                              : device::heads_cluster_supported_typed<__nv_bfloat16>(head_dim);
  return ok.ok() && *ok;
}

Status launch_decode_heads_cluster(const AttentionParams& params, DType dtype, int head_dim,
                                   int cluster_size, cudaStream_t stream) {
  if (cluster_size < 2 || cluster_size > kMaxDecodeClusterSize ||
      params.num_decode_items % cluster_size != 0) {
    return invalid_argument("decode cluster merge needs 2..8 splits per decode item group");
  }
  return dtype == DType::f16
             ? device::heads_cluster_launch_typed<half>(params, head_dim, cluster_size, stream)
             : device::heads_cluster_launch_typed<__nv_bfloat16>(params, head_dim, cluster_size,
                                                                 stream);
}

Result<int> decode_heads_ctas_per_sm(DType dtype, int head_dim) {
  return dtype == DType::f16 ? device::heads_ctas_per_sm_typed<half>(head_dim)
                             : device::heads_ctas_per_sm_typed<__nv_bfloat16>(head_dim);
}

}  // namespace detail
}  // namespace vpod::attention
