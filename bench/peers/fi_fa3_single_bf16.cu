// FlashInfer's FA3 single prefill, bf16 (sm_90a only; see fi_fa3_single.cuh).
#include "bench/peers/fi_fa3_single.cuh"

namespace vpod::bench::peers {

std::string run_fa3_single_bf16(const SinglePrefillArgs& a, cudaStream_t stream) {
  return run_fa3_single<cutlass::bfloat16_t>(a, stream);
}

}  // namespace vpod::bench::peers
