// The KV read probe (kv_probe.h): one kernel that reads every byte of the given
// ranges into a checksum, and its launcher.

#include "kvcache/kv_probe.h"

#include "common/cuda_check.h"

namespace vpod::kvcache {
namespace {

constexpr int kThreads = 256;
// Blocks per range: enough to keep every SM streaming for long ranges.
constexpr int kBlocksPerRange = 64;

// grid: (kBlocksPerRange, num_ranges). Each block strides over its range in
// 16-byte loads.
__global__ void kv_read_kernel(const KvRange* ranges, unsigned long long* checksum) {
  const KvRange range = ranges[blockIdx.y];
  const auto* data = static_cast<const uint4*>(range.data);
  const std::uint64_t n = range.bytes / sizeof(uint4);
  unsigned int acc = 0;
  for (std::uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(data + i);  // streaming: do not pollute L2 for others
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  // Warp-reduce, one atomic per warp.
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0 && acc != 0)
    atomicAdd(checksum, static_cast<unsigned long long>(acc));
}

}  // namespace

Status launch_kv_read(const KvRange* ranges, int num_ranges, std::uint64_t* device_checksum,
                      cudaStream_t stream) {
  if (num_ranges <= 0) return {};
  if (num_ranges > 65535) return invalid_argument("launch_kv_read: at most 65535 ranges");
  const dim3 grid(kBlocksPerRange, static_cast<unsigned>(num_ranges));
  kv_read_kernel<<<grid, kThreads, 0, stream>>>(
      ranges, reinterpret_cast<unsigned long long*>(device_checksum));
  return cuda_status(cudaGetLastError(), "kv_read_kernel launch");
}

}  // namespace vpod::kvcache
