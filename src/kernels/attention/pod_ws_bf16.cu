// The bf16 instantiations of the warp-specialized POD kernel (head_dim 64 and 128).
#include "kernels/attention/pod_kernels.h"
#include "kernels/attention/pod_ws.cuh"

namespace vpod::attention::detail {

Status launch_pod_ws_bf16(const PodParams& params, int grid, int head_dim, cudaStream_t stream) {
  return device::launch_pod_ws_typed<__nv_bfloat16>(params, grid, head_dim, stream);
}

Result<bool> pod_ws_runs_here_bf16(int head_dim) {
  return device::pod_ws_runs_here_typed<__nv_bfloat16>(head_dim);
}

}  // namespace vpod::attention::detail
