// Programmatic dependent launch (Hopper). A kernel launched with
// `launch_kernel(..., pdl = true)` may start while the previous kernel on
// the stream is still running (once every CTA of that kernel has called
// pdl_trigger() or exited). It must call pdl_wait() before it reads anything
// earlier kernels wrote or writes anything they read; constant data (weights)
// may be read before. pdl_wait() returns once the previous kernel has
// completed and its writes are visible, so every CTA calls it (a grid's
// completion then implies its predecessors' completion). Both are no-ops
// when the kernel was launched normally. Works inside CUDA graph capture (the
// edges become programmatic dependencies).
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

// Launches `kernel<<<grid, block, smem, stream>>>(args...)`, with
// programmatic stream serialization allowed when `pdl`; returns the launch
// error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace vpod::kernels
