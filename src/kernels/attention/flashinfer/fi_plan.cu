// FlashInfer's host planners (attention/scheduler.cuh) behind fi_args.h: the
// FA3 prefill plan and the FA2 prefill / tensor-core decode plan, made once
// per step on the CPU; every layer's launch reads the work lists they upload.
#include <exception>
#include <flashinfer/attention/scheduler.cuh>

#include "kernels/attention/flashinfer/fi_args.h"

namespace vpod::attention::fi {

namespace {

constexpr std::size_t kAlign = 16;  // AlignedAllocator's alignment for every array

std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// FA3's query tile (PrefillSM90Plan): 128 rows, 192 for head_dim 64.
int fa3_cta_tile_q(int head_dim) { return head_dim == 64 ? 192 : 128; }

template <typename F>
std::string guarded(F&& f) {
  try {
    const cudaError_t status = f();
    if (status != cudaSuccess) return cudaGetErrorString(status);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

std::size_t fa3_int_workspace_bytes(const PlanBatch& batch, int num_sms) {
  const int cta = fa3_cta_tile_q(batch.head_dim);
  std::size_t works = 0;
  for (int b = 0; b < batch.batch_size; ++b) {
    const int rows = batch.qo_indptr[b + 1] - batch.qo_indptr[b];
    works += static_cast<std::size_t>((rows + cta - 1) / cta);
  }
  works *= static_cast<std::size_t>(batch.num_qo_heads);
  // Seven per-work arrays and work_indptr [num_sms + 1].
  return 7 * aligned(sizeof(std::int32_t) * works) +
         aligned(sizeof(std::int32_t) * (static_cast<std::size_t>(num_sms) + 1));
}

std::string plan_fa3(const PlanBuffers& buffers, const PlanBatch& batch, cudaStream_t stream,
                     std::int64_t* plan_info) {
  return guarded([&] {
    flashinfer::PrefillPlanSM90Info info;
    const cudaError_t status = flashinfer::PrefillSM90Plan<std::int32_t>(
        buffers.float_workspace, buffers.float_bytes, buffers.int_workspace, buffers.pinned,
        buffers.int_bytes, info, batch.qo_indptr, batch.kv_indptr, batch.kv_len,
        static_cast<std::uint32_t>(batch.num_rows), static_cast<std::uint32_t>(batch.batch_size),
        static_cast<std::uint32_t>(batch.num_qo_heads),
        static_cast<std::uint32_t>(batch.num_kv_heads), static_cast<std::uint32_t>(batch.head_dim),
        static_cast<std::uint32_t>(batch.head_dim), static_cast<std::uint32_t>(batch.page_size),
        /*causal=*/true,
        /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, stream);
    const std::vector<std::int64_t> v = info.ToVector();
    std::copy(v.begin(), v.end(), plan_info);
    return status;
  });
}

std::string plan_fa2(const PlanBuffers& buffers, const PlanBatch& batch, bool cuda_graph,
                     int colocated_ctas, cudaStream_t stream, std::int64_t* plan_info) {
  return guarded([&] {
    flashinfer::PrefillPlanInfo info;
    const cudaError_t status = flashinfer::PrefillPlan<std::int32_t>(
        buffers.float_workspace, buffers.float_bytes, buffers.int_workspace, buffers.pinned,
        buffers.int_bytes, info, batch.qo_indptr, batch.kv_indptr,
        static_cast<std::uint32_t>(batch.num_rows), static_cast<std::uint32_t>(batch.batch_size),
        static_cast<std::uint32_t>(batch.num_qo_heads),
        static_cast<std::uint32_t>(batch.num_kv_heads), static_cast<std::uint32_t>(batch.head_dim),
        static_cast<std::uint32_t>(batch.head_dim), static_cast<std::uint32_t>(batch.page_size),
        cuda_graph, /*sizeof_dtype_o=*/2,
        /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
        /*num_colocated_ctas=*/colocated_ctas, /*uniform_q_len=*/0, stream);
    const std::vector<std::int64_t> v = info.ToVector();
    std::copy(v.begin(), v.end(), plan_info);
    return status;
  });
}

std::string fa2_workspace_bytes(const PlanBatch& batch, bool cuda_graph, int colocated_ctas,
                                std::size_t* float_bytes, std::size_t* int_bytes) {
  return guarded([&] {
    return flashinfer::PrefillPlanWorkspaceSize<std::int32_t>(
        *float_bytes, *int_bytes, batch.qo_indptr, batch.kv_indptr,
        static_cast<std::uint32_t>(batch.num_rows), static_cast<std::uint32_t>(batch.batch_size),
        static_cast<std::uint32_t>(batch.num_qo_heads),
        static_cast<std::uint32_t>(batch.num_kv_heads), static_cast<std::uint32_t>(batch.head_dim),
        static_cast<std::uint32_t>(batch.head_dim), static_cast<std::uint32_t>(batch.page_size),
        cuda_graph, /*sizeof_dtype_o=*/2,
        /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
        /*num_colocated_ctas=*/colocated_ctas, /*uniform_q_len=*/0, /*stream=*/nullptr);
  });
}

std::int64_t fa2_padded_batch_size(const std::int64_t* plan_info) {
  flashinfer::PrefillPlanInfo info;
  info.FromVector(std::vector<std::int64_t>(plan_info, plan_info + 15));
  return info.padded_batch_size;
}

}  // namespace vpod::attention::fi
