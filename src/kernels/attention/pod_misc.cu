// The %nsmid query behind PodCounters (the per-SM ticket table's size).
#include "common/cuda_check.h"
#include "kernels/attention/pod_kernels.h"

namespace vpod::attention {
namespace device {
namespace {

__global__ void read_nsmid_kernel(int* out) {
  unsigned n;
  asm volatile("mov.u32 %0, %%nsmid;\n" : "=r"(n));
  *out = static_cast<int>(n);
}

}  // namespace
}  // namespace device

namespace detail {

Result<int> query_nsmid(cudaStream_t stream) {
  int* value = nullptr;
  VPOD_CUDA_RETURN_IF_ERROR(cudaMallocHost(&value, sizeof(int)), StatusCode::internal);
  *value = -1;
  device::read_nsmid_kernel<<<1, 1, 0, stream>>>(value);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  const int n = *value;
  cudaFreeHost(value);
  VPOD_CUDA_RETURN_IF_ERROR(err, StatusCode::internal);
  return n;
}

}  // namespace detail
}  // namespace vpod::attention
