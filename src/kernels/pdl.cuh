// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl()
// may start while the previous kernel on the stream is still running; it must
// call pdl_wait() before it reads anything the previous kernels wrote or
// writes anything they read (weights may be read before). pdl_trigger() lets
// the next PDL-launched kernel start early; both are no-ops before sm_90 and
// when the kernel was launched normally. The decode step is ~300 small
// kernels, so hiding each launch's latency behind the previous kernel is a
// large share of a batch-1 step. Works inside CUDA graph capture (the edges
// become programmatic dependencies).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

namespace vpod::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Launches `kernel<<<grid, block, smem, stream>>>(args...)` with programmatic
// stream serialization allowed; returns the launch error.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                       cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace vpod::kernels
