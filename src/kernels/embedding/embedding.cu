// The row-gather kernel (embedding.h) and its launcher: the token embedding
// lookup and the selection of the rows whose logits are needed.

#include "common/cuda_check.h"
#include "kernels/dtype_dispatch.cuh"
#include "kernels/embedding/embedding.h"

namespace vpod::kernels {

namespace {

struct GatherParams {
  const void* table;  // [table_rows, dim] at table_stride
  const std::int32_t* rows;
  void* out;  // [num_rows, dim] at out_stride
  std::int64_t table_stride, out_stride, table_rows;
  std::int64_t first_row;  // rows[r] - first_row indexes the table
  int dim;
};

template <typename T>
__global__ void gather_rows_kernel(const __grid_constant__ GatherParams p) {
  const int r = blockIdx.x;
  const std::int64_t src = p.rows[r] - p.first_row;
  T* out = static_cast<T*>(p.out) + r * p.out_stride;
  if (src < 0 || src >= p.table_rows) {
    for (int i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = from_float<T>(0.0f);
    return;
  }
  const T* in = static_cast<const T*>(p.table) + src * p.table_stride;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = in[i];
}

}  // namespace

void gather_rows_gpu(const TensorView& table, const std::int32_t* rows, int num_rows,
                     const TensorView& out, cudaStream_t stream, std::int64_t first_row) {
  VPOD_CHECK_MSG(table.rank() == 2 && out.rank() == 2 && out.size(0) == num_rows &&
                     out.size(1) == table.size(1) && table.stride(1) == 1 && out.stride(1) == 1 &&
                     table.dtype() == out.dtype(),
                 "gather_rows_gpu shapes: " + table.to_string() + " -> " + out.to_string());
  if (num_rows == 0) return;
  GatherParams p{table.data(),  rows,          out.data(), table.stride(0),
                 out.stride(0), table.size(0), first_row,  static_cast<int>(table.size(1))};
  VPOD_DISPATCH_DTYPE(out.dtype(), T, { gather_rows_kernel<T><<<num_rows, 256, 0, stream>>>(p); });
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::kernels
