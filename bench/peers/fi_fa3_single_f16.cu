// FlashInfer's FA3 single prefill, f16 (sm_90a only; see fi_fa3_single.cuh).
#include "bench/peers/fi_fa3_single.cuh"

namespace vpod::bench::peers {

std::string run_fa3_single_f16(const SinglePrefillArgs& a, cudaStream_t stream) {
  return run_fa3_single<cutlass::half_t>(a, stream);
}

}  // namespace vpod::bench::peers
