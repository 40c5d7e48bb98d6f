// The NCCL communicator (communicator.h) for CUDA ranks: one per GPU, made on
// the GPU's own thread, its collectives enqueued on the rank's backend stream
// (CUDA graphs capture them). libnccl.so.2 is loaded at run time (dlopen, as
// cuBLASLt is), so the binary starts without it; without it tensor
// parallelism on CUDA is refused with the reason.
//
// NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set in the process
// before NCCL initializes, unless the user set it. The GPU machines' notes
// (KINDS.md) say a program using multicast can put the host's shared GPUs
// out of service for a day or more.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>

#include "common/status.h"
#include "model/communicator.h"

namespace vpod::model {

// ncclUniqueId's bytes: created by global rank 0, handed to every rank (over
// TCP to other nodes: engine/nccl_id_exchange.h).
struct NcclId {
  static constexpr std::size_t kBytes = 128;  // NCCL_UNIQUE_ID_BYTES
  std::array<char, kBytes> bytes{};
};

// Loads NCCL (once per process) and sets NCCL_NVLS_ENABLE=0 unless set:
// ok, or unavailable saying why ("libnccl.so.2 not found ...").
Status load_nccl();
// "2.28.9" after load_nccl succeeded.
std::string nccl_version();
Result<NcclId> nccl_unique_id();

// Rank `rank` of `size` on the calling thread's current device; collectives
// run on `stream` (the rank's backend stream). Blocks until every rank of
// the group has called it.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int rank, int size,
                                                             cudaStream_t stream);

}  // namespace vpod::model
