// TMA descriptors for a contiguous (vAttention) KV layer. The virtual tensor
// never moves (pages are mapped under it on demand), so one descriptor per
// layer describes every sequence's K or V: a 4D tensor {head_dim, kv head,
// token, slot}, read in boxes of 64 dims x 64 tokens of one head and slot,
// written to shared memory with the 128-byte swizzle that the wgmma prefill
// tile's descriptors expect. A paged cache has no such tensor: its 64-token
// blocks are scattered in 16- or 256-token pages, so it keeps cp.async.
#pragma once

#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "kernels/attention/attention_params.h"

namespace vpod::attention {

// Fills `maps` (valid = 1) for `kv`, or says why it cannot: no CUDA driver
// with cuTensorMapEncodeTiled, a layout the kernel's boxes do not fit (head
// dim not a multiple of 64, 4-byte elements), or the driver rejected the
// descriptor (strides not multiples of 16 bytes, say).
Status encode_kv_tensor_maps(const KvLayerView& kv, KvTensorMaps& maps);

// The warp-specialized prefill kernel's Q descriptor: `q` ([tokens, heads,
// head_dim], token stride a multiple of 8 elements, 2-byte elements) as a 3D
// tensor {head_dim, head, token} in boxes of 64 dims x `pack` heads x
// kPrefillBlockM / pack tokens (AttentionParams::ws_pack; the box's rows land
// token-major, head-minor), 128-byte swizzle; rows past the last token read
// as zero.
Status encode_q_tensor_map(const TensorView& q, int num_tokens, int pack, TensorMapBytes& map);

// The descriptors the launchers pass to the prefill and POD kernels: those of
// encode_kv_tensor_maps, or valid = 0 (cp.async loads) when it fails. (The
// launchers skip it for a plan with KernelOptions::tma = false.)
KvTensorMaps contiguous_tensor_maps(const KvLayerView& kv);

}  // namespace vpod::attention
