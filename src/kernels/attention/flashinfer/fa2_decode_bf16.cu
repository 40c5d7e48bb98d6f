// FA2 tensor-core decode (one query row per sequence, no mask), bf16: the
// query tiles FlashInfer's planner picks for packed decode rows (GQA group x 1):
// 16 up to a group of 16, 64 up to 64 (fa2.cuh).
#include "kernels/attention/flashinfer/fa2.cuh"

namespace vpod::attention::fi {

using Decode = nv_bfloat16;

std::string run_fa2_decode_bf16(const RunArgs& args) {
  return run_fa2<Decode>(args, [&](int tile, Fa2PagedParams<Decode>& p, Decode* tmp_v, float* tmp_s,
                                   cudaError_t& status) {
    using flashinfer::MaskMode;
    if (tile == 16) {
      status = launch_fa2<Decode, MaskMode::kNone, 16>(p, tmp_v, tmp_s, args.stream);
    } else if (tile == 64) {
      status = launch_fa2<Decode, MaskMode::kNone, 64>(p, tmp_v, tmp_s, args.stream);
    } else {
      return false;
    }
    return true;
  });
}

}  // namespace vpod::attention::fi
