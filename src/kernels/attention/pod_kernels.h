// Internal: host entry points of the fused POD kernel, per element type
// (pod_f16.cu, pod_bf16.cu), and the %nsmid query (pod_misc.cu). Only
// pod_launch.cpp calls them, after validating every input.
#pragma once

#include <cuda_runtime_api.h>

#include "common/status.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/pod_params.h"

namespace vpod::attention::detail {

// grid = prefill_ctas + decode_ctas, 128 threads; params.wgmma_prefill picks
// the prefill tile (an error where the GPU cannot run the wgmma one), options
// its launch-time switches (wgmma_knobs).
Status launch_pod_f16(const PodParams& params, const KernelOptions& options, int head_dim,
                      cudaStream_t stream);
Status launch_pod_bf16(const PodParams& params, const KernelOptions& options, int head_dim,
                       cudaStream_t stream);
// Co-resident CTAs per SM of the fused kernel with the wgmma or the mma.sync
// prefill tile (occupancy query, current device).
Result<int> pod_ctas_per_sm_f16(int head_dim, bool wgmma);
Result<int> pod_ctas_per_sm_bf16(int head_dim, bool wgmma);
// Whether the current device runs the wgmma variant's sm_90a code.
Result<bool> pod_wgmma_runs_here_f16(int head_dim);
Result<bool> pod_wgmma_runs_here_bf16(int head_dim);
// %nsmid of the current device, read by a one-thread kernel on `stream`
// (synchronizes the stream).
Result<int> query_nsmid(cudaStream_t stream);

}  // namespace vpod::attention::detail
