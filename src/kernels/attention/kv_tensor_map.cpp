// TMA descriptors of a contiguous KV layer: encoding through the driver entry
// point, and the launchers' fallback to cp.async when that fails.
#include "kernels/attention/kv_tensor_map.h"

#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "common/cuda_check.h"
#include "common/log.h"
#include "cuda/driver_api.h"

namespace vpod::attention {
namespace {

// The tile's box: 64 head dims (128 bytes, the swizzle span) x 64 tokens.
constexpr cuuint32_t kBoxDims = 64;
constexpr cuuint32_t kBoxTokens = kPrefillBlockN;
// Q: one box per 64-dim column of a 128-row tile.
constexpr cuuint32_t kQBoxTokens = kPrefillBlockM;
static_assert(sizeof(TensorMapBytes) == sizeof(CUtensorMap), "a CUtensorMap is 128 bytes");

Status encode_one(const cuda::DriverApi& api, void* base, const KvLayerView& kv,
                  TensorMapBytes& out) {
  const std::uint64_t elem = dtype_size(kv.dtype);
  // Dimensions from the fastest: head dim, head, token, slot (strides in bytes
  // for all but the first, which is contiguous).
  const cuuint64_t dims[4] = {
      static_cast<cuuint64_t>(kv.head_dim), static_cast<cuuint64_t>(kv.num_kv_heads),
      static_cast<cuuint64_t>(kv.max_ctx), static_cast<cuuint64_t>(kv.num_slots)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(kv.head_stride) * elem,
                                 static_cast<cuuint64_t>(kv.token_stride) * elem,
                                 static_cast<cuuint64_t>(kv.slot_stride) * elem};
  const cuuint32_t box[4] = {kBoxDims, 1, kBoxTokens, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  VPOD_CU_RETURN_IF_ERROR(
      api.cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, base, dims, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      StatusCode::invalid_argument);
  std::memcpy(out.words, &map, sizeof(map));
  return Status();
}

}  // namespace

Status encode_kv_tensor_maps(const KvLayerView& kv, KvTensorMaps& maps) {
  maps.valid = 0;
  if (kv.device != Device::cuda) return invalid_argument("TMA needs a KV cache on cuda");
  if (dtype_size(kv.dtype) != 2) {
    return invalid_argument(
        fmt::format("TMA K/V loads are for 2-byte elements, not {}", dtype_name(kv.dtype)));
  }
  if (kv.head_dim <= 0 || kv.head_dim % kBoxDims != 0) {
    return invalid_argument(
        fmt::format("TMA boxes are 64 dims wide; head_dim {} is not a multiple", kv.head_dim));
  }
  if (kv.num_kv_heads <= 0 || kv.max_ctx <= 0 || kv.num_slots <= 0) {
    return invalid_argument("TMA needs a non-empty KV view");
  }
  // Any stride order works (the copy addresses base + sum of coordinate x
  // stride); the driver checks that strides are multiples of 16 bytes below 2^40.
  VPOD_ASSIGN_OR_RETURN(const cuda::DriverApi* api, cuda::driver_api());
  VPOD_RETURN_IF_ERROR(encode_one(*api, kv.k, kv, maps.k));
  VPOD_RETURN_IF_ERROR(encode_one(*api, kv.v, kv, maps.v));
  maps.valid = 1;
  return Status();
}

Status encode_q_tensor_map(const TensorView& q, int num_tokens, int pack, TensorMapBytes& map) {
  if (q.device() != Device::cuda) return invalid_argument("TMA needs Q on cuda");
  if (dtype_size(q.dtype()) != 2) {
    return invalid_argument(
        fmt::format("TMA Q loads are for 2-byte elements, not {}", dtype_name(q.dtype())));
  }
  if (q.rank() != 3 || q.size(2) % kBoxDims != 0 || num_tokens <= 0) {
    return invalid_argument(
        fmt::format("TMA Q needs [tokens, heads, 64k] rows, got {}", q.to_string()));
  }
  if (pack < 1 || pack > q.size(1) || pack > static_cast<int>(kQBoxTokens)) {
    return invalid_argument(
        fmt::format("TMA Q packs 1..min(heads, {}) heads per box, not {}", kQBoxTokens, pack));
  }
  VPOD_ASSIGN_OR_RETURN(const cuda::DriverApi* api, cuda::driver_api());
  const std::uint64_t elem = 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(q.size(2)),
                              static_cast<cuuint64_t>(q.size(1)),
                              static_cast<cuuint64_t>(num_tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(q.stride(1)) * elem,
                                 static_cast<cuuint64_t>(q.stride(0)) * elem};
  const cuuint32_t box[3] = {kBoxDims, static_cast<cuuint32_t>(pack),
                             kQBoxTokens / static_cast<cuuint32_t>(pack)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap encoded;
  VPOD_CU_RETURN_IF_ERROR(
      api->cuTensorMapEncodeTiled(&encoded, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, q.data(), dims,
                                  strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      StatusCode::invalid_argument);
  std::memcpy(map.words, &encoded, sizeof(encoded));
  return Status();
}

KvTensorMaps contiguous_tensor_maps(const KvLayerView& kv) {
  KvTensorMaps maps;
  const Status st = encode_kv_tensor_maps(kv, maps);
  if (!st.ok()) {
    // Said once per process: the prefill runs correctly on cp.async, but slower.
    static std::once_flag said;
    std::call_once(said, [&] {
      VPOD_LOG_INFO("attention: TMA K/V loads off, prefill uses cp.async: {}", st.message());
    });
  }
  return maps;
}

}  // namespace vpod::attention
