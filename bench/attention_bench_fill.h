// Device-side random fill for `vpod bench attention` (caches of many GB are
// filled on the GPU, not copied from the host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace vpod::bench {

// Writes `count` fp16 (or bf16) values uniform in [-sqrt(3), sqrt(3))
// (variance 1), a pure function of (seed, index).
void fill_random_device(void* data, std::size_t count, std::uint64_t seed, bool bf16,
                        cudaStream_t stream);

// Reads `bytes` (a multiple of 64) once with 16-byte loads, 4 in flight per
// thread, on `ctas` CTAs of 512 threads: the read-only bandwidth ceiling a
// decode kernel streams against. `sink` (4 bytes) is written only if the data
// XOR to a value it never has, so the loads cannot be optimized away.
void read_bandwidth_device(const void* data, std::size_t bytes, int ctas, unsigned* sink,
                           cudaStream_t stream);

}  // namespace vpod::bench
