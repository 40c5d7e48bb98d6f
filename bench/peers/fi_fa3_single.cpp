// The FA3 single-prefill peer's entry: dispatch on dtype, or say that this
// build does not hold it (VPOD_BENCH_PEERS off, or no sm_90a in the archs).
#include "bench/peers/fi_fa3_single.h"

#include <string>

namespace vpod::bench::peers {

#ifdef VPOD_BENCH_FI_FA3_SINGLE
std::string run_fa3_single_f16(const SinglePrefillArgs& a, cudaStream_t stream);
std::string run_fa3_single_bf16(const SinglePrefillArgs& a, cudaStream_t stream);
#endif

bool fi_fa3_single_built() {
#ifdef VPOD_BENCH_FI_FA3_SINGLE
  return true;
#else
  return false;
#endif
}

Status fi_fa3_single_prefill(const SinglePrefillArgs& args, cudaStream_t stream) {
#ifdef VPOD_BENCH_FI_FA3_SINGLE
  if (args.dtype != DType::f16 && args.dtype != DType::bf16) {
    return invalid_argument("the FA3 single-prefill peer runs fp16 or bf16");
  }
  const std::string error = args.dtype == DType::f16 ? run_fa3_single_f16(args, stream)
                                                     : run_fa3_single_bf16(args, stream);
  if (!error.empty()) return internal_error("FlashInfer FA3 single prefill: " + error);
  return Status();
#else
  (void)args, (void)stream;
  return unimplemented(
      "this build has no FlashInfer FA3 single-prefill peer (configure with -DVPOD_BENCH_PEERS=ON "
      "and sm_90a in VPOD_CUDA_ARCHS)");
#endif
}

}  // namespace vpod::bench::peers
