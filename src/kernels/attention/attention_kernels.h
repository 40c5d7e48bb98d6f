// Internal: the host entry points of the attention kernels, one per kernel and
// element type, implemented in the .cu files of this folder. Only the
// launchers (attention_launch.cpp, pod_launch.cpp) call them, after
// validating every input.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_params.h"

namespace vpod::attention::detail {

// grid = (num_q_heads, num_prefill_items); the wgmma kernel where the device
// runs it and options.wgmma_prefill allows it, else the mma.sync kernel.
Status launch_prefill_f16(const AttentionParams& params, const KernelOptions& options, int head_dim,
                          cudaStream_t stream);
Status launch_prefill_bf16(const AttentionParams& params, const KernelOptions& options,
                           int head_dim, cudaStream_t stream);
// grid = (num_kv_heads * decode_head_chunks, num_decode_items)
Status launch_decode_f16(const AttentionParams& params, int head_dim, cudaStream_t stream);
Status launch_decode_bf16(const AttentionParams& params, int head_dim, cudaStream_t stream);
// The heads decode kernel: grid = (ceil(units / kDecodeHeadsPerCta),
// num_decode_items), units = num_kv_heads * decode_head_chunks.
Status launch_decode_heads(const AttentionParams& params, DType dtype, int head_dim,
                           cudaStream_t stream);
Result<int> decode_heads_ctas_per_sm(DType dtype, int head_dim);
// The heads kernel with its splits merged per cluster of `cluster_size`
// consecutive decode items (sm_90, AttentionPlan::decode_cluster_size()).
Status launch_decode_heads_cluster(const AttentionParams& params, DType dtype, int head_dim,
                                   int cluster_size, cudaStream_t stream);
bool decode_heads_cluster_supported(DType dtype, int head_dim);
// The cluster-merged tile decode kernel (decode_cluster.cu, sm_90): grid as
// launch_decode, clusters of `cluster_size` consecutive decode items (the
// splits of one decode, AttentionPlan::decode_cluster_size()).
Status launch_decode_cluster(const AttentionParams& params, DType dtype, int head_dim,
                             int cluster_size, cudaStream_t stream);
// Whether the device runs the cluster kernel's sm_90 code.
bool decode_cluster_supported(DType dtype, int head_dim);
// Clusters of `cluster_size` CTAs of the cluster kernel that fit on the device at once.
Result<int> decode_cluster_max_active(DType dtype, int head_dim, int cluster_size);
// The deep tile decode kernel (decode_deep.cu): grid as launch_decode, one
// CTA per SM with a 6-stage (head_dim 128) or 8-stage (64) K/V pipeline.
Status launch_decode_deep(const AttentionParams& params, DType dtype, int head_dim,
                          cudaStream_t stream);
// Whether the device gives the deep kernel its shared memory (not an sm_80 for head_dim 128).
bool decode_deep_supported(DType dtype, int head_dim);
// Its CTAs per SM (0 where unsupported).
Result<int> decode_deep_ctas_per_sm(DType dtype, int head_dim);
// Merges KV splits: one CTA per combine item.
Status launch_combine(const CombineParams& params, DType dtype, int head_dim, cudaStream_t stream);
Status launch_append(const AppendParams& params, cudaStream_t stream);

// The kernels' parameters for one launch of `plan` (the attention and POD
// launchers): pointers, shapes, the plan's device lists and the options'
// softmax settings; the caller adds the TMA descriptors and walk fields.
AttentionParams make_params(const AttentionPlan& plan, const AttentionBuffers& buffers,
                            const TensorView& q, const TensorView& out, float softmax_scale,
                            const KvAddressing& kv);
// A combine launch over `count` of the plan's combine items.
CombineParams make_combine(const AttentionParams& p, const AttentionPlan& plan,
                           const CombineItem* items, std::size_t count);

// How the kernels address K/V: a contiguous view's slot strides, or a paged
// view's blocks through its table (shared by the attention and POD launchers).
KvAddressing contiguous_addressing(const KvLayerView& kv);
KvAddressing paged_addressing(const PagedKvView& kv);

enum class KernelKind { prefill, prefill_ws, decode, decode_heads };
// CTAs of a kernel that fit on one SM of the current device (occupancy query;
// prefill: the one-warpgroup kernel the planner's slots count; prefill_ws: the
// warp-specialized kernel, 0 where the device does not run its code).
Result<int> ctas_per_sm(KernelKind kind, DType dtype, int head_dim);
Result<int> ctas_per_sm_f16(KernelKind kind, int head_dim);
Result<int> ctas_per_sm_bf16(KernelKind kind, int head_dim);
// Clusters of 2 of the warp-specialized prefill's K/V-multicast kernel that
// the device runs at once (0 where it does not run its code). The launcher
// multicasts only when they cover every SM (launch_prefill_ws).
Result<int> ws_multicast_clusters(DType dtype, int head_dim);
Result<int> ws_multicast_clusters_f16(int head_dim);
Result<int> ws_multicast_clusters_bf16(int head_dim);

}  // namespace vpod::attention::detail
