// The f16 instantiations of the warp-specialized POD kernel (head_dim 64 and 128).
#include "kernels/attention/pod_kernels.h"
#include "kernels/attention/pod_ws.cuh"

namespace vpod::attention::detail {

Status launch_pod_ws_f16(const PodParams& params, int grid, int head_dim, cudaStream_t stream) {
  return device::launch_pod_ws_typed<half>(params, grid, head_dim, stream);
}

Result<bool> pod_ws_runs_here_f16(int head_dim) {
  return device::pod_ws_runs_here_typed<half>(head_dim);
}

}  // namespace vpod::attention::detail
