// The paged baseline's attention (`--kv-cache paged`): FlashInfer 0.7.2.post1's
// kernels, compiled into vpod from its wheel's headers (fi_args.h). Prefill
// chunks run FlashInfer's FA3 batch prefill on sm_90a (FA2 elsewhere), decodes
// its tensor-core decode (the FA2 batch prefill kernel with one query row per
// sequence, as BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)).
//
// A hybrid batch planned with PagedMode::pod runs FlashInfer's POD kernel
// instead (BatchPODWithPagedKVCacheWrapper: FA2 prefill and the tensor-core
// decode in one launch, fa2_pod.cuh), the paged baseline's `--attention pod`.
//
// Plan once per step on the CPU, run once per layer, like FlashInfer's
// wrappers: build() turns the batch into FlashInfer's page lists (indptr and
// last_page_len on the host; indices gathered on the device from the cache's
// block table, gather_pages), runs FlashInfer's planners into page-locked
// staging and uploads everything on the stream, all once per step;
// prefill() and decode() only launch, so a layer can be captured in a CUDA
// graph (decode-only steps plan in FlashInfer's CUDA-graph mode, whose launch
// shape depends on the batch size alone). Buffers grow to the largest step
// and are never shrunk: a warmed-up step allocates no device or pinned memory
// (FlashInfer's planners themselves use small host vectors).
//
// Layouts: q, out [tokens, q_heads, head_dim] (prefill chunks' tokens, then
// one per decode, in HybridBatch order; heads contiguous, the token stride is
// free for q; out contiguous); K/V pools NHD [pages, page_size, kv_heads,
// head_dim] (PagedKvView). Supported: head_dim 128, fp16/bf16, GQA groups up
// to 64, any page size.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "cuda/device_buffer.h"
#include "cuda/event.h"
#include "cuda/pinned_buffer.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/flashinfer/fi_args.h"

namespace vpod::attention::fi {

// Whether this build runs FlashInfer's paged attention for `dims` on the
// current device (head_dim 128, fp16/bf16, a prefill kernel for its
// architecture); `unimplemented` naming what is missing otherwise.
Status paged_attention_supported(const AttentionDims& dims);

// Which FlashInfer kernel runs the prefill chunks.
enum class PrefillBackend : std::uint8_t { fa3, fa2 };

// serial: prefill chunks, then decodes (two launches). pod: FlashInfer's POD
// kernel for a step with both (one launch); a step with only one kind, or a
// GQA group over 16 (POD's decode tile holds 16 rows), runs serially.
enum class PagedMode : std::uint8_t { serial, pod };

// What runs the paged cache's attention on the current device in `mode`, with
// FlashInfer's version (the pinned wheel's), for reports and logs: e.g.
// "FlashInfer 0.7.2.post1: FA3 paged prefill + tensor-core decode". A Status
// as paged_attention_supported's when no kernel would run.
Result<std::string> paged_kernels_label(PagedMode mode);

class PagedPlan {
 public:
  PagedPlan() = default;
  PagedPlan(PagedPlan&&) = default;
  PagedPlan& operator=(PagedPlan&&) = default;

  // Plans `batch` over `kv` and uploads the plan on `stream`; kv's device
  // block table must hold the step's blocks when the stream reaches the
  // upload. `cuda_graph`: plan the decodes in FlashInfer's CUDA-graph mode
  // (pass it for steps that are replayed as graphs). Returns true when a
  // device buffer moved (grew): graphs recorded against the old ones are
  // stale. The previous build's uploads are waited for before their staging
  // is rewritten.
  Result<bool> build(const HybridBatch& batch, const AttentionDims& dims, const PagedKvView& kv,
                     bool cuda_graph, cudaStream_t stream, PagedMode mode = PagedMode::serial);
  // Forgets the step (no tokens), keeps the buffers.
  void clear();

  const AttentionDims& dims() const { return dims_; }
  int num_prefill_tokens() const { return num_prefill_tokens_; }
  int num_decode_tokens() const { return num_decodes_; }
  int num_tokens() const { return num_prefill_tokens_ + num_decodes_; }
  PrefillBackend prefill_backend() const { return prefill_backend_; }
  // The step runs FlashInfer's POD kernel (built with PagedMode::pod, both
  // kinds present): run() launches it, prefill() and decode() refuse.
  bool fused() const { return fused_; }
  // FlashInfer's query tile for the decodes (16 or 64; 0: no decodes).
  int decode_cta_tile_q() const;
  // Everything a recorded launch bakes in beyond the per-step data in the
  // plan's buffers (plan infos, buffer addresses, batch sizes).
  std::uint64_t launch_key() const;

  // The step's attention: the POD launch when fused(), else prefill() then decode().
  Status run(const TensorView& q, const PagedKvView& kv, const TensorView& out, float softmax_scale,
             cudaStream_t stream) const;
  // Attention of the prefill chunks' queries (rows [0, num_prefill_tokens)).
  Status prefill(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                 float softmax_scale, cudaStream_t stream) const;
  // Attention of the decodes' queries (the last num_decode_tokens rows).
  Status decode(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                float softmax_scale, cudaStream_t stream) const;

 private:
  // One planned launch: its batch's page lists (int32 offsets into the page
  // buffer) and FlashInfer's plan.
  struct Part {
    int batch_size = 0;
    int num_rows = 0;
    std::size_t qo_indptr = 0, kv_indptr = 0, last_page_len = 0, slots = 0, indices = 0;
    std::int64_t plan_info[kMaxPlanInfo] = {};
    cuda::DeviceBuffer int_workspace;
    cuda::PinnedBuffer pinned;
    // Host arrays FlashInfer's planners read (cleared, never shrunk).
    std::vector<std::int32_t> qo_indptr_host, kv_indptr_host, kv_len_host;
  };
  // How a part is planned.
  struct PartPlan {
    bool fa3 = false;
    bool cuda_graph = false;
    int colocated_ctas = 0;                // FA2: the other POD half's CTAs
    cuda::DeviceBuffer* floats = nullptr;  // the split partials' buffer
  };

  // Lays the part's page lists out at `cursor` (int32 units) in the staging
  // image: qo_indptr, kv_indptr, last_page_len, slots, then room for indices
  // (gathered on the device); write_part then fills the host-made ones.
  Status lay_out_part(const std::vector<BatchSequence>& seqs, const PagedKvView& kv, Part& part,
                      std::size_t& cursor);
  void write_part(const std::vector<BatchSequence>& seqs, const Part& part);
  Result<bool> plan_part(Part& part, const PartPlan& how, cudaStream_t stream);
  Status validate_launch(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                         float softmax_scale) const;
  RunArgs run_args(const Part& part, int row_offset, const TensorView& q, const PagedKvView& kv,
                   const TensorView& out, float softmax_scale, cudaStream_t stream,
                   const cuda::DeviceBuffer& floats) const;
  Status run_pod(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                 float softmax_scale, cudaStream_t stream) const;

  AttentionDims dims_;
  int page_size_ = 0;
  int num_prefill_tokens_ = 0;
  int num_decodes_ = 0;
  int num_sms_ = 0;
  int cc_major_ = 0;
  PrefillBackend prefill_backend_ = PrefillBackend::fa3;
  bool fused_ = false;
  Part prefill_;
  Part decode_;
  // Page lists of both parts: [decode qo_indptr | kv_indptr | last_page_len |
  // slots | indices | prefill ...] in int32, so a decode-only step's arrays
  // sit at offsets fixed by its batch size.
  cuda::PinnedBuffer pages_host_;
  cuda::DeviceBuffer pages_;
  cuda::DeviceBuffer float_workspace_;  // split partials (FA2), shared: launches are serial
  // POD: the prefill half's split partials (the halves run at once) and the
  // kernel's SM-aware counters [kPodSchedInts].
  cuda::DeviceBuffer pod_float_workspace_;
  cuda::DeviceBuffer pod_sched_;
  cuda::Event uploaded_;  // after the last build's copies
  bool upload_pending_ = false;
};

}  // namespace vpod::attention::fi
