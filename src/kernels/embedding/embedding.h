// Row gathers: the token embedding lookup, and picking the rows whose logits
// are needed (the last token of each sequence) before the final norm.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/tensor_view.h"

namespace vpod::kernels {

// out[r, :] = table[rows[r], :]; each index must be in [0, table_rows).
void gather_rows_ref(const float* table, std::int64_t table_stride, std::int64_t table_rows,
                     const std::int32_t* rows, int num_rows, int dim, float* out,
                     std::int64_t out_stride);

// table [N, dim], out [num_rows, dim] (same dtype); rows is a device array.
// out[r] = table[rows[r] - first_row]: the table holds rows [first_row,
// first_row + N) of a larger one (a tensor-parallel rank's vocab slice). An
// index outside them writes zeros (the vocab-parallel embedding's mask; it
// also keeps a bad id from reading out of bounds).
void gather_rows_gpu(const TensorView& table, const std::int32_t* rows, int num_rows,
                     const TensorView& out, cudaStream_t stream, std::int64_t first_row = 0);

}  // namespace vpod::kernels
