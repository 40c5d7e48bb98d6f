// The step's FlashInfer page lists from vpod's block table (fi_args.h,
// gather_pages): one CTA per sequence copies its row's leading entries. Runs
// once per step, before every layer reads the lists.
#include "kernels/attention/flashinfer/fi_args.h"

namespace vpod::attention::fi {

namespace {

constexpr int kGatherThreads = 128;

__global__ void gather_pages_kernel(const std::int32_t* __restrict__ block_table,
                                    int max_blocks_per_slot, const std::int32_t* __restrict__ slots,
                                    const std::int32_t* __restrict__ kv_indptr,
                                    std::int32_t* __restrict__ indices) {
  const int b = blockIdx.x;
  const std::int32_t begin = kv_indptr[b];
  const std::int32_t pages = kv_indptr[b + 1] - begin;
  const std::int32_t* row = block_table + static_cast<std::int64_t>(slots[b]) * max_blocks_per_slot;
  for (int p = threadIdx.x; p < pages; p += blockDim.x) indices[begin + p] = row[p];
}

}  // namespace

std::string gather_pages(const std::int32_t* block_table, int max_blocks_per_slot,
                         const std::int32_t* slots, const std::int32_t* kv_indptr, int batch_size,
                         std::int32_t* indices, cudaStream_t stream) {
  if (batch_size == 0) return {};
  gather_pages_kernel<<<batch_size, kGatherThreads, 0, stream>>>(block_table, max_blocks_per_slot,
                                                                 slots, kv_indptr, indices);
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? std::string() : std::string(cudaGetErrorString(status));
}

}  // namespace vpod::attention::fi
