// The f16 instantiations of the fused POD kernel (head_dim 64 and 128).
#include "kernels/attention/pod_kernel.cuh"
#include "kernels/attention/pod_kernels.h"

namespace vpod::attention::detail {

Status launch_pod_f16(const PodParams& params, int head_dim, cudaStream_t stream) {
  return device::launch_pod_typed<half>(params, head_dim, stream);
}

Result<int> pod_ctas_per_sm_f16(int head_dim, int virtual_decode) {
  return device::pod_ctas_per_sm_typed<half>(head_dim, virtual_decode);
}

}  // namespace vpod::attention::detail
