// FlashInfer's POD kernel (its BatchPODWithPagedKVCacheWrapper), fp16: prefill
// query tiles 16, 64 and 128 with the 16-row decode tile (fa2_pod.cuh).
#include "kernels/attention/flashinfer/fa2_pod.cuh"

namespace vpod::attention::fi {

std::string run_fa2_pod_f16(const RunArgs& prefill, const RunArgs& decode, std::int32_t* sched) {
  return run_fa2_pod<half>(prefill, decode, sched);
}

}  // namespace vpod::attention::fi
