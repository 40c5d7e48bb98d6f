// A peer for `vpod bench attention`: FlashInfer's FA3 (sm_90a) single-request
// prefill over a contiguous K/V tensor, the kernel `flashinfer.
// single_prefill_with_kv_cache(backend="fa3")` runs, compiled from the pinned
// wheel's headers into the bench when CMake has -DVPOD_BENCH_PEERS=ON (off by
// default: two more CUTLASS units that only the GPU comparison needs).
// Causal with the bottom-right alignment (query i of n sees keys up to
// kv_len - n + i), head_dim 128, fp16 or bf16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"

namespace vpod::bench::peers {

struct SinglePrefillArgs {
  DType dtype = DType::f16;
  const void* q = nullptr;  // [qo_len, num_qo_heads, head_dim], token stride q_stride_n
  const void* k = nullptr;  // [kv_len, num_kv_heads, head_dim], token stride kv_stride_n
  const void* v = nullptr;
  void* o = nullptr;  // like q
  int qo_len = 0;
  int kv_len = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::int64_t q_stride_n = 0;  // elements
  std::int64_t kv_stride_n = 0;
  float sm_scale = 0.f;
};

// Whether this build holds the peer (VPOD_BENCH_PEERS=ON and sm_90a code).
bool fi_fa3_single_built();
Status fi_fa3_single_prefill(const SinglePrefillArgs& args, cudaStream_t stream);

}  // namespace vpod::bench::peers
