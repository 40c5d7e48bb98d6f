// The heads decode kernel (decode_heads_tile.cuh), fp16 and bf16: one CTA per
// (decode item, kDecodeHeadsPerCta units), in its own translation unit.
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

template <typename T, int kHeadDim>
Status prepare() {
  VPOD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(decode_heads_kernel<T, kHeadDim>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 DecodeHeadsTile<T, kHeadDim>::kSmemBytes),
                            StatusCode::internal);
  return Status();
}

template <typename T>
Status heads_launch_typed(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    static const Status prepared = prepare<T, kHeadDim>();
    VPOD_RETURN_IF_ERROR(prepared);
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

Result<int> decode_heads_ctas_per_sm(DType dtype, int head_dim) {
  return dtype == DType::f16 ? device::heads_ctas_per_sm_typed<half>(head_dim)
                             : device::heads_ctas_per_sm_typed<__nv_bfloat16>(head_dim);
}

}  // namespace detail
}  // namespace vpod::attention
