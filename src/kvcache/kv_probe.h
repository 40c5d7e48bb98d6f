// A GPU probe that reads every byte of a list of KV ranges once: the memory
// traffic of a decode step's attention over those slots (what `vpod bench
// kvcache` runs while the mapper maps the next step's pages), and a check
// that the ranges are mapped (an unmapped byte is an illegal-address fault).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace vpod::kvcache {

struct KvRange {
  const void* data = nullptr;  // 16-byte aligned
  std::uint64_t bytes = 0;     // multiple of 16
};

// ranges: device array of `num_ranges` KvRange. Adds a checksum of all bytes
// read to *device_checksum (so the reads cannot be optimized away).
Status launch_kv_read(const KvRange* ranges, int num_ranges, std::uint64_t* device_checksum,
                      cudaStream_t stream);

}  // namespace vpod::kvcache
