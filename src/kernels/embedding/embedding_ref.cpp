// The CPU reference of the row gather (embedding.h), in fp32.

#include <cstring>

#include "common/check.h"
#include "kernels/embedding/embedding.h"

namespace vpod::kernels {

void gather_rows_ref(const float* table, std::int64_t table_stride, std::int64_t table_rows,
                     const std::int32_t* rows, int num_rows, int dim, float* out,
                     std::int64_t out_stride) {
  for (int r = 0; r < num_rows; ++r) {
    VPOD_CHECK(rows[r] >= 0 && rows[r] < table_rows);
    std::memcpy(out + r * out_stride, table + rows[r] * table_stride, sizeof(float) * dim);
  }
}

}  // namespace vpod::kernels
