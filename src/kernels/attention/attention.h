// Attention over the KV cache: the public API the model runtime calls.
//
// One engine step:
//   1. plan.build(batch, dims, {.num_sms = gpu.sm_count});   (CPU, once; reuses the plan's memory)
//   2. plan.upload(buffers, stream);                          (once per step)
//   3. per layer: append_kv(...); prefill(...); decode(...);   (on a KvLayerView; a
//      paged cache runs FlashInfer's kernels, flashinfer/paged_plan.h, and only
//      append_kv takes its PagedKvView)
// The plan holds every tile, split and combine decision for the step; every
// layer reuses it. Launchers validate shapes, strides and dtypes and return a
// Status on a mismatch; they allocate nothing (metadata and workspace come in
// `AttentionBuffers`, sized by the plan) and only enqueue kernels on `stream`,
// so a layer's launches can be captured in a CUDA graph.
//
// Layouts (strides in elements, head_dim always contiguous):
//   q, out      [num_tokens, num_q_heads, head_dim], token stride free
//               (prefill chunks' tokens first, then one token per decode,
//               in HybridBatch order)
//   k_new/v_new [num_tokens, num_kv_heads, head_dim], token stride free
//   K/V cache   KvLayerView (contiguous per slot; both vAttention layouts)
// Query i of a sequence sits at position cached_len + i and attends to
// positions [0, cached_len + i] (bottom-right causal); a decode attends to its
// whole context. The new tokens' K/V must be appended before attention runs.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "kernels/attention/attention_params.h"

namespace vpod::attention {

// A model's attention heads and element type; fixed for the model's life.
struct AttentionDims {
  int num_q_heads = 0;
  int num_kv_heads = 0;      // divides num_q_heads (GQA group = q / kv)
  int head_dim = 0;          // 64 or 128
  DType dtype = DType::f16;  // f16 or bf16 (q, out, K/V cache)

  int group_size() const { return num_kv_heads > 0 ? num_q_heads / num_kv_heads : 0; }
};

// Checks heads, head_dim and dtype against what the kernels support.
Status validate_dims(const AttentionDims& dims);

// PagedKvView (the paged baseline's block table, common/kv_view.h) is read
// by FlashInfer's kernels (flashinfer/paged_plan.h); vpod's append_kv writes
// its pages.

// The decode kernel a plan is cut for (docs/attention.md).
enum class DecodeKernel {
  // Per batch: heads when the tile grid needs more than one wave of CTA slots
  // and the heads grid fits in one; tile_deep when the tile plan splits, the
  // unsplit decodes fit one CTA per SM and are estimated faster so; tile
  // otherwise.
  automatic,
  tile,   // one CTA per (split, KV head, head chunk); its 4 warps share the keys
  heads,  // one CTA per (split, 4 KV heads / head chunks); one warp per head
  // The tile kernel's CTAs at one per SM with a deeper K/V pipeline
  // (decode_deep.cu): chosen for unsplit decodes that fit one CTA per SM
  // where the tile kernel would have to split them (16 x 16K, 8 KV heads).
  tile_deep,
};

// The most KV splits of one decode that the decode kernels merge as one
// thread-block cluster through distributed shared memory (sm_90; the portable
// cluster size).
inline constexpr int kMaxDecodeClusterSize = 8;

// CTA slots a cluster-merged decode launch gets, by cluster size (index
// 2..kMaxDecodeClusterSize; 0 and 1 unused): active clusters x size. A
// cluster's CTAs must share a GPC, so large clusters strand slots of GPCs
// whose free slots are fewer than a cluster (H200, head dim 128: 132
// clusters of 2, all 264 slots; 30 clusters of 8, 240 slots). 0: as many
// as a plain launch (num_sms x kDecodeCtasPerSm).
using DecodeClusterSlots = std::array<int, kMaxDecodeClusterSize + 1>;

// How the launchers run a plan. The defaults are the fast paths the engine
// uses; the alternatives exist for comparisons (`vpod bench attention|pod`
// flags) and tests. The plan carries them (PlanOptions::kernels), so every
// layer of a step launches alike.
struct KernelOptions {
  // Prefill on the sm_90a wgmma kernel where the GPU runs its code; false:
  // the mma.sync kernel. (POD's prefill tile follows PodDevice::wgmma_prefill:
  // query_pod_device(dims, wgmma_prefill).)
  bool wgmma_prefill = true;
  // The wgmma prefill tile loads contiguous K/V blocks by TMA; false: cp.async.
  bool tma = true;
  // Contiguous prefill on the warp-specialized sm_90a kernel (prefill_ws.cuh:
  // TMA producer, two ping-ponging consumer warpgroups, persistent) where the
  // GPU runs it and TMA descriptors exist; false: the one-warpgroup wgmma tile.
  bool ws_prefill = true;
  // The warp-specialized kernel walks its tiles head-major whatever their
  // costs (experiment; by default head-major only when the items cost alike,
  // attention_launch.cpp). One CTA per tile only: K/V-multicast pairs always
  // walk item-major.
  bool ws_head_major = false;
  // The warp-specialized kernel packs a KV head's query heads into one tile
  // where the plan allows it (AttentionPlan::prefill_pack); false: one query
  // head per tile always (comparison).
  bool ws_gqa_pack = true;
  // The warp-specialized kernel runs clusters of 2 CTAs that share each K/V
  // block by TMA multicast, walking item-major, on walks of one query head per
  // tile with an even group (attention_kernels.cuh, launch_prefill_ws); false:
  // one CTA per tile always (comparison).
  bool ws_multicast = true;
  // Every prefill kernel (the warp-specialized one, the wgmma and mma.sync
  // tiles, POD's prefill side) keeps a row's running max until a key block
  // beats it by more than kMaxSlack (log2 units), so O's rescale is skipped
  // on most blocks; false: the max follows every rise (comparison).
  bool lazy_max = true;
  // Split decodes merge inside the decode kernel (arrival counters, or the
  // cluster merge where planned); false: the separate combine kernel.
  bool decode_merge_in_kernel = true;
  // The wgmma prefill tile skips a half's O rescale when no row of the warp
  // raised its maximum; false: rescale on every key block.
  bool wgmma_lazy_rescale = true;
};

// Whether a contiguous prefill runs on the warp-specialized kernel: the device
// runs its code (`ws_ctas_per_sm` > 0: query_ws_prefill_ctas_per_sm) and the
// options keep it (it needs the wgmma path and TMA descriptors). The planners'
// shared rule; the launcher decides the same from the device and the maps.
constexpr bool ws_prefill_runs(const KernelOptions& kernels, int ws_ctas_per_sm) {
  return ws_ctas_per_sm > 0 && kernels.wgmma_prefill && kernels.ws_prefill && kernels.tma;
}

struct PlanOptions {
  int num_sms = 0;  // SMs of the GPU the plan runs on (GpuInfo::sm_count); required
  // 0: the planner decides. n > 0: force n KV splits per prefill tile / decode
  // (clipped so no split is empty). For tests and experiments.
  int prefill_splits = 0;
  int decode_splits = 0;
  DecodeKernel decode_kernel = DecodeKernel::automatic;
  // Let the decode splits merge as a cluster where the plan allows it
  // (decode_cluster_size()); false keeps the arrival-counter merge through
  // global memory.
  bool decode_cluster_merge = true;
  // How the launchers run the plan (carried by it).
  KernelOptions kernels{};
  // The device's slots for cluster-merged decodes (query_decode_cluster_slots);
  // the planner counts the stranded ones when it weighs a cluster merge.
  DecodeClusterSlots decode_cluster_slots{};
  // CTAs per SM of the warp-specialized prefill where the device runs it
  // (query_ws_prefill_ctas_per_sm), 0 where it does not. The planner sizes
  // the prefill's waves and KV splits for the kernel that runs: this
  // persistent kernel's num_sms x this many CTAs, else the tile kernels'
  // num_sms x kPrefillCtasPerSm.
  int ws_prefill_ctas_per_sm = 0;
};

// The current device's DecodeClusterSlots for `dims` (zeros where the cluster
// kernels do not run: sm_80), queried on the tile kernel's cluster variant.
// The heads variant has the same threads and shared memory; its registers
// differ, which matters only beyond the planner's kDecodeCtasPerSm per SM
// (head dim 64), and the planner never counts more slots than that.
Result<DecodeClusterSlots> query_decode_cluster_slots(const AttentionDims& dims);
// The current device's PlanOptions::ws_prefill_ctas_per_sm for `dims` (an
// occupancy query; 0 where the device does not run the kernel's sm_90a code).
Result<int> query_ws_prefill_ctas_per_sm(const AttentionDims& dims);

// Device memory a plan needs, owned by the caller and sized once for the
// largest step (plan.metadata_bytes(), plan.workspace_bytes()).
struct AttentionBuffers {
  void* metadata = nullptr;  // the plan's work lists, written by AttentionPlan::upload
  std::size_t metadata_bytes = 0;
  void* workspace = nullptr;  // fp32 partial outputs of KV splits, decode split counters
  std::size_t workspace_bytes = 0;
};

// Every decision for one step's attention, made on the CPU from the batch.
// A value: plan each step into the same object with build(), which reuses its
// vectors' capacity, so that once warmed up to the largest step planning
// allocates nothing.
class AttentionPlan {
 public:
  // A new plan (build() into a fresh object).
  static Result<AttentionPlan> create(const HybridBatch& batch, const AttentionDims& dims,
                                      const PlanOptions& options);
  // Plans `batch` into this object, replacing its content. On an error the
  // plan is left empty (no tokens, no items).
  Status build(const HybridBatch& batch, const AttentionDims& dims, const PlanOptions& options);
  // Empties the plan (no tokens, no items), keeping its memory.
  void clear();

  const AttentionDims& dims() const { return dims_; }
  int num_tokens() const { return num_prefill_tokens_ + num_decode_tokens_; }
  int num_prefill_tokens() const { return num_prefill_tokens_; }
  int num_decode_tokens() const { return num_decode_tokens_; }
  // The largest slot index and context length the batch touches (validated
  // against the KV view at launch).
  int max_slot() const { return max_slot_; }
  int max_context_len() const { return max_context_len_; }

  // Device bytes needed: metadata (work lists) and workspace (split partials).
  std::size_t metadata_bytes() const { return metadata_.size(); }
  std::size_t workspace_bytes() const;
  // Copies the work lists into buffers.metadata on `stream` (asynchronously;
  // the plan must stay alive until the copy has run) and zeroes the decode
  // split counters in buffers.workspace. Once per step.
  Status upload(const AttentionBuffers& buffers, cudaStream_t stream) const;

  // The plan's content, for launchers, tests and the benchmark.
  const std::vector<PrefillWorkItem>& prefill_items() const { return prefill_items_; }
  // Whether every prefill item costs within 20% of the longest (chunks over
  // a long context), not a causal prompt's tiles of 1..n blocks: the
  // warp-specialized kernel then walks its tiles head-major
  // (docs/attention.md).
  bool prefill_items_cost_alike() const {
    return !prefill_items_.empty() &&
           5 * prefill_items_.back().cost >= 4 * prefill_items_.front().cost;
  }
  // The query heads one tile of the warp-specialized kernel can hold: the
  // group size when every prefill item has at most kPrefillBlockM / group
  // query rows (short chunks: a conversation's next turn over its cached
  // context), so a tile covers a KV head's whole group and reads each K/V
  // block once for it; else 1. The launcher packs where the kernel runs and
  // KernelOptions::ws_gqa_pack allows; the other prefill kernels run the same
  // items one query head per tile.
  int prefill_pack() const { return prefill_pack_; }
  // Items whose tile packs (PrefillWorkItem::pack > 1): the packable ones
  // where the step's walk packs (gqa_packable_tiles_pack), else none.
  int prefill_packed_items() const { return prefill_packed_items_; }
  // Whether the warp-specialized kernel packs per item (AttentionParams::
  // ws_mixed): some items pack but not all. ws_tiles(): the tiles of its walk
  // (num_kv_heads per packed item, num_q_heads per other; per item or uniform).
  bool prefill_pack_mixed() const { return prefill_pack_mixed_; }
  int ws_tiles() const { return ws_tiles_; }
  const std::vector<DecodeWorkItem>& decode_items() const { return decode_items_; }
  const std::vector<CombineItem>& prefill_combines() const { return prefill_combines_; }
  const std::vector<CombineItem>& decode_combines() const { return decode_combines_; }
  int partial_rows() const { return partial_rows_; }
  int decode_head_chunks() const;
  // The decode kernel (never automatic) and its CTAs per decode item.
  DecodeKernel decode_kernel() const { return decode_kernel_; }
  // S > 0 when the decode splits merge as clusters of S CTAs: every
  // decode has S (2..kMaxDecodeClusterSize) splits, the estimate (on the
  // slots whole clusters get, PlanOptions::decode_cluster_slots) beats the
  // counter merge of the same splits, and the items are consecutive
  // (decode_items()[S * i + j] is split j of the i-th decode, longest decodes
  // first). 0: splits (if any) merge through the arrival counters. The
  // launcher falls back to the counters where the device lacks clusters
  // (the counters and partial rows stay planned either way).
  int decode_cluster_size() const { return decode_cluster_size_; }
  int decode_ctas_per_item() const;
  // Arrival counters of the decode splits in the workspace (one per combine,
  // KV head and head chunk); upload() zeroes them.
  std::size_t decode_counter_count() const;
  // Device pointers into `buffers` for the kernels' parameters.
  PlanPointers pointers(const AttentionBuffers& buffers) const;
  // How the launchers run this plan (PlanOptions::kernels).
  const KernelOptions& kernel_options() const { return kernels_; }
  // The same work lists launched with other kernel options (comparisons:
  // POD's tests run the prefill tile the fused kernel embeds on its plan).
  AttentionPlan with_kernel_options(const KernelOptions& kernels) const {
    AttentionPlan copy = *this;
    copy.kernels_ = kernels;
    return copy;
  }

 private:
  // A prefill tile before its KV split: kPrefillBlockM query rows of one chunk.
  struct Tile {
    int seq, q_begin, rows, kv_end, blocks;
  };
  // Planning memory kept between builds (cleared, never shrunk).
  struct Scratch {
    std::vector<Tile> tiles;
    std::vector<double> costs;                             // CTA costs of one candidate
    std::vector<std::pair<double, long long>> free_slots;  // (free at, CTA slots), latest first
    std::vector<int> decode_blocks, decode_order;
    // Merge buffers of the stable sorts.
    std::vector<PrefillWorkItem> prefill_items;
    std::vector<DecodeWorkItem> decode_items;
    std::vector<int> sorted_order;
  };

  AttentionDims dims_;
  int num_prefill_tokens_ = 0;
  int num_decode_tokens_ = 0;
  int max_slot_ = 0;
  int max_context_len_ = 0;
  std::vector<SequenceDesc> prefill_seqs_;
  std::vector<SequenceDesc> decode_seqs_;
  std::vector<PrefillWorkItem> prefill_items_;
  std::vector<DecodeWorkItem> decode_items_;
  std::vector<CombineItem> prefill_combines_;
  std::vector<CombineItem> decode_combines_;
  std::vector<TokenSlot> token_slots_;
  int partial_rows_ = 0;
  int prefill_pack_ = 1;
  int prefill_packed_items_ = 0;
  bool prefill_pack_mixed_ = false;
  int ws_tiles_ = 0;
  DecodeKernel decode_kernel_ = DecodeKernel::tile;
  int decode_cluster_size_ = 0;
  PlanLayout layout_;
  std::vector<std::byte> metadata_;  // host image of the device metadata
  KernelOptions kernels_;
  Scratch scratch_;

  void build_metadata();
};

// ---------------------------------------------------------------------------
// Launchers. Each validates its inputs, then enqueues on `stream`. The plan
// must have been uploaded to `buffers` (upload() once per step).
// ---------------------------------------------------------------------------

// Writes every new token's K and V (prefill chunks and decodes) into the cache
// at (slot, cached_len + i); into a paged cache's pages through its table.
Status append_kv(const AttentionPlan& plan, const AttentionBuffers& buffers,
                 const TensorView& k_new, const TensorView& v_new, const KvLayerView& kv,
                 cudaStream_t stream);
Status append_kv(const AttentionPlan& plan, const AttentionBuffers& buffers,
                 const TensorView& k_new, const TensorView& v_new, const PagedKvView& kv,
                 cudaStream_t stream);

// Attention of the prefill chunks' queries (rows [0, num_prefill_tokens) of q
// and out). softmax_scale is usually 1/sqrt(head_dim); it must be > 0.
Status prefill(const AttentionPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
               const KvLayerView& kv, const TensorView& out, float softmax_scale,
               cudaStream_t stream);

// Attention of the decodes' queries (the last num_decode_tokens rows).
Status decode(const AttentionPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
              const KvLayerView& kv, const TensorView& out, float softmax_scale,
              cudaStream_t stream);

}  // namespace vpod::attention
