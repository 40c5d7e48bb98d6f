// FA2 paged prefill, causal, fp16: FlashInfer's prefill where FA3 does not run
// (sm_80; built for every architecture but sm_90a, see fa2.cuh).
#include "kernels/attention/flashinfer/fa2.cuh"

namespace vpod::attention::fi {

using Prefill = half;

std::string run_fa2_prefill_f16(const RunArgs& args) {
  return run_fa2<Prefill>(args, [&](int tile, Fa2PagedParams<Prefill>& p, Prefill* tmp_v,
                                    float* tmp_s, cudaError_t& status) {
    using flashinfer::MaskMode;
    if (tile == 16) {
      status = launch_fa2<Prefill, MaskMode::kCausal, 16>(p, tmp_v, tmp_s, args.stream);
    } else if (tile == 64) {
      status = launch_fa2<Prefill, MaskMode::kCausal, 64>(p, tmp_v, tmp_s, args.stream);
    } else if (tile == 128) {
      status = launch_fa2<Prefill, MaskMode::kCausal, 128>(p, tmp_v, tmp_s, args.stream);
    } else {
      return false;
    }
    return true;
  });
}

}  // namespace vpod::attention::fi
