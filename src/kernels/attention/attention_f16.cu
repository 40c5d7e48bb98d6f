// The f16 instantiations of the prefill and decode kernels.
#include "kernels/attention/attention_kernels.cuh"

namespace vpod::attention::detail {

Status launch_prefill_f16(const AttentionParams& params, const KernelOptions& options, int head_dim,
                          cudaStream_t stream) {
  return device::launch_prefill_typed<half>(params, options, head_dim, stream);
}

Status launch_decode_f16(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  return device::launch_decode_typed<half>(params, head_dim, stream);
}

Result<int> ctas_per_sm_f16(KernelKind kind, int head_dim) {
  return device::ctas_per_sm_typed<half>(kind, head_dim);
}

Result<int> ws_multicast_clusters_f16(int head_dim) {
  return device::ws_multicast_clusters_typed<half>(head_dim);
}

}  // namespace vpod::attention::detail
