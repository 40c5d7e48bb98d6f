// The bf16 instantiations of the prefill and decode kernels.
#include "kernels/attention/attention_kernels.cuh"

namespace vpod::attention::detail {

Status launch_prefill_bf16(const AttentionParams& params, const KernelOptions& options,
                           int head_dim, cudaStream_t stream) {
  return device::launch_prefill_typed<__nv_bfloat16>(params, options, head_dim, stream);
}

Status launch_decode_bf16(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  return device::launch_decode_typed<__nv_bfloat16>(params, head_dim, stream);
}

Result<int> ctas_per_sm_bf16(KernelKind kind, int head_dim) {
  return device::ctas_per_sm_typed<__nv_bfloat16>(kind, head_dim);
}

Result<int> ws_multicast_clusters_bf16(int head_dim) {
  return device::ws_multicast_clusters_typed<__nv_bfloat16>(head_dim);
}

}  // namespace vpod::attention::detail
