// The plain arguments vpod hands to its FlashInfer translation units (the
// *.cu files of this folder, compiled as C++17 against the flashinfer-python
// wheel's headers, see cmake/flashinfer.cmake). Nothing of vpod's is included
// here, so both sides can share it. Functions return "" on success, else the
// error (FlashInfer's exceptions and CUDA errors never cross this boundary).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace vpod::attention::fi {

// FlashInfer's plan info vectors (PrefillPlanInfo: 15, PrefillPlanSM90Info: 9).
inline constexpr int kMaxPlanInfo = 16;

enum class Element : int { f16, bf16 };

// One layer's paged K/V in FlashInfer's NHD layout and the batch's page lists.
struct PagedKvArgs {
  void* k = nullptr;              // [num_pages, page_size, num_kv_heads, head_dim]
  void* v = nullptr;              // same shape and strides as k
  std::int64_t page_stride = 0;   // elements between pages
  std::int64_t token_stride = 0;  // elements between tokens of a page
  std::int64_t head_stride = 0;   // elements between heads of a token
  int page_size = 0;
  int num_kv_heads = 0;
  std::int32_t* indices = nullptr;        // device [indptr[batch]] page ids, in token order
  std::int32_t* indptr = nullptr;         // device [batch + 1] each sequence's range of indices
  std::int32_t* last_page_len = nullptr;  // device [batch] tokens in the last page (1..page_size)
};

// One launch over a batch of sequences: query rows [qo_indptr[b], qo_indptr[b+1])
// of sequence b sit at the last positions of its context (bottom-right).
struct RunArgs {
  Element dtype = Element::f16;
  int head_dim = 0;
  int num_qo_heads = 0;
  void* q = nullptr;  // [num_rows, num_qo_heads, head_dim]
  std::int64_t q_stride_n = 0, q_stride_h = 0;
  void* o = nullptr;  // [num_rows, num_qo_heads, head_dim]
  std::int64_t o_stride_n = 0, o_stride_h = 0;
  int num_rows = 0;
  int batch_size = 0;
  std::int32_t* qo_indptr = nullptr;  // device [batch + 1]
  PagedKvArgs kv;
  float sm_scale = 0.0f;
  void* int_workspace = nullptr;    // the plan's device int buffer
  void* float_workspace = nullptr;  // split partials (FA2)
  std::int64_t plan_info[kMaxPlanInfo] = {};
  cudaStream_t stream = nullptr;
};

// Host side of a plan: FlashInfer writes its work lists into `pinned` and
// copies them to `int_workspace` on `stream`.
struct PlanBuffers {
  void* int_workspace = nullptr;
  void* pinned = nullptr;  // page-locked, as large as int_workspace
  std::size_t int_bytes = 0;
  void* float_workspace = nullptr;
  std::size_t float_bytes = 0;
};

// The batch a plan is made for (host arrays, FlashInfer's int32 indices).
struct PlanBatch {
  std::int32_t* qo_indptr = nullptr;  // [batch + 1] query rows
  std::int32_t* kv_indptr = nullptr;  // [batch + 1] pages
  std::int32_t* kv_len = nullptr;     // [batch] tokens (FA3)
  int batch_size = 0;
  int num_rows = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
};

// FA3 (sm_90a) batch prefill, causal: PrefillSM90Plan.
std::string plan_fa3(const PlanBuffers& buffers, const PlanBatch& batch, cudaStream_t stream,
                     std::int64_t* plan_info);
// Int workspace bytes plan_fa3 writes at most for this batch on `num_sms` SMs.
std::size_t fa3_int_workspace_bytes(const PlanBatch& batch, int num_sms);

// FA2 batch prefill (also the tensor-core decode): PrefillPlan. `cuda_graph`:
// FlashInfer's CUDA-graph mode (grid fixed by the batch size, always split).
// `colocated_ctas`: CTAs another half of a POD launch occupies (the prefill's
// KV splits leave room for them; 0 outside POD).
std::string plan_fa2(const PlanBuffers& buffers, const PlanBatch& batch, bool cuda_graph,
                     int colocated_ctas, cudaStream_t stream, std::int64_t* plan_info);
// The workspaces plan_fa2 needs for this batch (PrefillPlanWorkspaceSize).
std::string fa2_workspace_bytes(const PlanBatch& batch, bool cuda_graph, int colocated_ctas,
                                std::size_t* float_bytes, std::size_t* int_bytes);
// PrefillPlanInfo's padded batch size: the CTAs of a planned FA2 launch per KV head.
std::int64_t fa2_padded_batch_size(const std::int64_t* plan_info);

// Writes a batch's page ids from vpod's block table, on the device:
//   indices[kv_indptr[b] + p] = block_table[slots[b] * max_blocks_per_slot + p]
// for p < kv_indptr[b + 1] - kv_indptr[b]. block_table [num_slots,
// max_blocks_per_slot]; slots, kv_indptr: device [batch], [batch + 1].
std::string gather_pages(const std::int32_t* block_table, int max_blocks_per_slot,
                         const std::int32_t* slots, const std::int32_t* kv_indptr, int batch_size,
                         std::int32_t* indices, cudaStream_t stream);

// Launchers (one per dtype, each in its own translation unit). The fa3 and
// fa2-prefill units exist only for the architectures that run them: fa3 for
// sm_90a, fa2-prefill for the others (flashinfer_kernels_available()).
std::string run_fa3_prefill_f16(const RunArgs& args);
std::string run_fa3_prefill_bf16(const RunArgs& args);
std::string run_fa2_prefill_f16(const RunArgs& args);  // causal
std::string run_fa2_prefill_bf16(const RunArgs& args);
std::string run_fa2_decode_f16(const RunArgs& args);  // one query row per sequence, no mask
std::string run_fa2_decode_bf16(const RunArgs& args);
// FlashInfer's POD kernel: `prefill` (causal) and `decode` (one row per
// sequence, planned with query tile kPodDecodeTileQ) in one launch
// (fa2_pod.cuh). `sched`: device int32 [kPodSchedInts], the kernel's SM-aware
// counters, one per SM id and two tile counters after the last, zeroed on the
// stream before each launch. The kernel indexes them by %nsmid, which the
// host cannot query: room for 1024 SM ids.
inline constexpr int kPodDecodeTileQ = 16;
inline constexpr int kPodSchedInts = 1024 + 2;
std::string run_fa2_pod_f16(const RunArgs& prefill, const RunArgs& decode, std::int32_t* sched);
std::string run_fa2_pod_bf16(const RunArgs& prefill, const RunArgs& decode, std::int32_t* sched);

}  // namespace vpod::attention::fi
