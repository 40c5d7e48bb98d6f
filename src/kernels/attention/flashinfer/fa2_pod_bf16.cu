// FlashInfer's POD kernel (its BatchPODWithPagedKVCacheWrapper), bf16: prefill
// query tiles 16, 64 and 128 with the 16-row decode tile (fa2_pod.cuh).
#include "kernels/attention/flashinfer/fa2_pod.cuh"

namespace vpod::attention::fi {

std::string run_fa2_pod_bf16(const RunArgs& prefill, const RunArgs& decode, std::int32_t* sched) {
  return run_fa2_pod<nv_bfloat16>(prefill, decode, sched);
}

}  // namespace vpod::attention::fi
