// The f16 instantiations of the fused POD kernel (head_dim 64 and 128).
#include "kernels/attention/pod_kernel.cuh"
#include "kernels/attention/pod_kernels.h"

namespace vpod::attention::detail {

Status launch_pod_f16(const PodParams& params, const KernelOptions& options, int head_dim,
                      cudaStream_t stream) {
  return device::launch_pod_typed<half>(params, options, head_dim, stream);
}

Result<int> pod_ctas_per_sm_f16(int head_dim, bool wgmma) {
  return device::pod_ctas_per_sm_typed<half>(head_dim, wgmma);
}

Result<bool> pod_wgmma_runs_here_f16(int head_dim) {
  return device::pod_wgmma_runs_here_typed<half>(head_dim);
}

}  // namespace vpod::attention::detail
