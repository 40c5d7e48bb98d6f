// FA3 paged prefill, bf16 (sm_90a only; see fa3_prefill.cuh).
#include "kernels/attention/flashinfer/fa3_prefill.cuh"

namespace vpod::attention::fi {

std::string run_fa3_prefill_bf16(const RunArgs& args) {
  return run_fa3_prefill<cutlass::bfloat16_t>(args);
}

}  // namespace vpod::attention::fi
