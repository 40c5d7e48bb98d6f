// The deep decode kernel: the tile decode (DecodeTile, one CTA per (item, KV
// head, head chunk), its 4 warps sharing each 64-key block) at one CTA per SM
// with a deep cp.async pipeline (6 stages of K/V for head_dim 128, 8 for 64:
// ~192 / 128 KB of shared memory), fp16 and bf16.
//
// Why: a decode batch whose (sequence, KV head) units nearly fill the SMs
// once but only half of the 2-per-SM CTA slots of the tile kernel (16 x 16K
// with 8 KV heads: 128 units on 132 SMs) had to be split in two to keep HBM
// busy, and the two halves of every unit merged (cluster merge: two cluster
// barriers and the split rows through distributed shared memory). One CTA
// per SM with 5 blocks (160 KB) in flight instead of two CTAs with 2 each
// (128 KB) streams the unit unsplit: no merge, no partial rows, no cluster,
// and the same bytes per SM in flight or more. The plan picks it
// (DecodeKernel::tile_deep, attention_plan.cpp) when the unsplit decodes fit
// one CTA per SM and the split tile plan is estimated slower; forced splits
// still work (the counter merge, merge_decode_splits).
//
// Shared memory: head_dim 128 needs 196 KB, more than an sm_80 CTA may opt
// into (163 KB); where the device cannot give it, decode_deep_supported() is
// false and the launcher runs the ordinary tile kernel on the same plan (the
// same items; only the grid's occupancy differs).
#include "kernels/attention/attention_kernels.cuh"

namespace vpod::attention {
namespace device {
namespace {

// K/V pipeline stages of the deep kernel: 6 x 32 KB (head_dim 128) or
// 8 x 16 KB (head_dim 64).
template <int kHeadDim>
constexpr int deep_stages() {
  return kHeadDim == 128 ? 6 : 8;
}

template <typename T, int kHeadDim>
using DeepTile = DecodeTile<T, kHeadDim, deep_stages<kHeadDim>()>;

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, 1)
    decode_deep_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  const int chunk = static_cast<int>(blockIdx.x) % params.decode_head_chunks;
  const int kv_head = static_cast<int>(blockIdx.x) / params.decode_head_chunks;
  const DecodeWorkItem item = params.plan.decode_items[blockIdx.y];
  DeepTile<T, kHeadDim>::run(params, item, kv_head, chunk, smem, static_cast<int>(threadIdx.x));
  if (params.plan.decode_counters != nullptr && item.combine >= 0) {
    merge_decode_splits<T, kHeadDim>(params, item.combine, kv_head, chunk,
                                     static_cast<int>(threadIdx.x));
  }
}

// The streaming form for unsplit plans with more units than SMs (32 x 4K:
// 256, 64 x 8K: 512 units on 132 SMs): one CTA per SM walks units b, b + G,
// b + 2G, ... (G = gridDim.x) as one continuous stream of 64-key blocks, so
// the next unit's first blocks load while the current one finishes and no
// SM waits for a new CTA's item, Q and pipeline fill. A stage holds K, V and,
// for a unit's first block, the unit's Q tile (any unit may be a single
// block); the cross-warp merge buffers sit outside the stages. Layout:
// [kSmemQ unused][merge buffers][stage 0: K V Q] ... [stage kStages-1].
// The per-block arithmetic and the merge are DecodeTile's, so the output is
// the tile kernel's bit for bit.
template <typename T, int kHeadDim>
struct StreamLayout {
  using Tile = DecodeTile<T, kHeadDim>;
  static constexpr int kStages = kHeadDim == 128 ? 5 : 8;
  static constexpr int kStageBytes = 2 * Tile::kSmemKV + Tile::kSmemQ;
  // merge_o(smem) is smem + kSmemQ: the merge buffers follow the unused gap.
  static constexpr int kStagesOffset = Tile::kSmemQ + Tile::kSmemMerge;
  static constexpr int kSmemBytes = kStagesOffset + kStages * kStageBytes;
  static_assert(kStagesOffset % 128 == 0 && kStageBytes % 128 == 0, "128-byte aligned stages");
};

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, 1)
    decode_stream_kernel(const __grid_constant__ AttentionParams p) {
  using L = StreamLayout<T, kHeadDim>;
  using Tile = typename L::Tile;
  using Sw = SwizzledTile<kHeadDim>;
  using E = ElementTraits<T>;
  constexpr int kStages = L::kStages;
  constexpr int kRows = Tile::kRows;
  constexpr int kBlockN = Tile::kBlockN;
  constexpr int kWarpKeys = Tile::kWarpKeys;
  constexpr int kKSteps = Tile::kKSteps;
  constexpr int kDAtoms = Tile::kDAtoms;
  extern __shared__ __align__(128) char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const std::uint32_t s_stages = smem_addr(smem) + L::kStagesOffset;
  const int per_item = p.num_kv_heads * p.decode_head_chunks;
  const int total = p.num_decode_items * per_item;
  const int stride = static_cast<int>(gridDim.x);

  // A unit is (item, KV head, head chunk), numbered as decode_kernel's
  // (blockIdx.y, blockIdx.x).
  // open() only issues the item's load; its fields are first used an
  // iteration later, so the stream does not wait for it.
  struct Cursor {
    int unit, block;
    DecodeWorkItem item;
    __device__ int num_blocks() const {
      return (item.kv_end - item.kv_begin + kBlockN - 1) / kBlockN;
    }
  };
  auto open = [&](Cursor& c, int unit) {
    c.unit = unit;
    c.block = 0;
    if (unit < total) c.item = p.plan.decode_items[unit / per_item];
  };
  auto chunk_of = [&](int unit) { return unit % per_item % p.decode_head_chunks; };
  auto kv_head_of = [&](int unit) { return unit % per_item / p.decode_head_chunks; };

  // The loader: the next block of this CTA's stream (and a unit's Q with its
  // first block) into stage `issued % kStages`; one commit group per call.
  Cursor ld;
  open(ld, static_cast<int>(blockIdx.x));
  int issued = 0;
  auto issue = [&] {
    if (ld.unit < total) {
      const std::uint32_t st = s_stages + (issued % kStages) * L::kStageBytes;
      const int kv_head = kv_head_of(ld.unit);
      Tile::load_stage(st, p.kv, ld.item.slot, kv_head, ld.item.kv_begin + ld.block * kBlockN,
                       ld.item.kv_end, tid);
      if (ld.block == 0) {
        const int chunk = chunk_of(ld.unit);
        const int head0 = kv_head * p.group_size + chunk * kRows;
        const int rows = min(kRows, p.group_size - chunk * kRows);
        const T* q_rows = static_cast<const T*>(p.q) +
                          static_cast<std::int64_t>(ld.item.token_offset) * p.q_token_stride +
                          static_cast<std::int64_t>(head0) * kHeadDim;
        load_tile_async<kRows, kHeadDim, Tile::kThreads>(
            st + 2 * Tile::kSmemKV, tid, p.q,
            [&](int row) -> const void* { return row < rows ? q_rows + row * kHeadDim : nullptr; });
      }
      if (++ld.block == ld.num_blocks()) open(ld, ld.unit + stride);
    }
    cp_async_commit();
    ++issued;
  };
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) issue();

  Cursor cu;
  open(cu, static_cast<int>(blockIdx.x));
  std::uint32_t q_frag[kKSteps][4];
  float o[kDAtoms][4];
  float row_max[2], row_sum[2];
  const std::uint32_t k_lane = Sw::lane_offset((lane / 16) * 8 + (lane % 8), (lane / 8) % 2);
  const std::uint32_t v_lane = Sw::lane_offset(lane % 8 + ((lane / 8) % 2) * 8, lane / 16);
  for (int g = 0; cu.unit < total; ++g) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // block g landed; every warp is done with block g - 1's stage
    issue();
    const std::uint32_t st = s_stages + (g % kStages) * L::kStageBytes;
    if (cu.block == 0) {  // a new unit: its Q rode with this block
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        ldmatrix_x4(q_frag[ks], st + 2 * Tile::kSmemKV +
                                    Sw::at(Sw::lane_offset(lane % 16, lane / 16), 0, ks * 2));
      }
#pragma unroll
      for (int d = 0; d < kDAtoms; ++d) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[d][e] = 0.f;
      }
      row_max[0] = row_max[1] = -INFINITY;
      row_sum[0] = row_sum[1] = 0.f;
    }
    // DecodeTile::accumulate's block, unchanged.
    const std::uint32_t s_k_warp = st + warp * kWarpKeys * Sw::kRowBytes;
    const std::uint32_t s_v_warp = s_k_warp + Tile::kSmemKV;
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      std::uint32_t b[4];
      ldmatrix_x4(b, s_k_warp + Sw::at(k_lane, 0, ks * 2));
      const std::uint32_t b_lo[2] = {b[0], b[1]};
      const std::uint32_t b_hi[2] = {b[2], b[3]};
      E::mma(s[0], q_frag[ks], b_lo);
      E::mma(s[1], q_frag[ks], b_hi);
    }
    const int key0 = cu.item.kv_begin + cu.block * kBlockN + warp * kWarpKeys;
    if (key0 + kWarpKeys > cu.item.kv_end) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (key0 + j * 8 + (lane % 4) * 2 + (e & 1) >= cu.item.kv_end) s[j][e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float block_max =
          fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      block_max = quad_max(block_max) * p.scale_log2;
      const float new_max = fmaxf(row_max[h], block_max);
      const float base = new_max == -INFINITY ? 0.f : new_max;
      const float correction = exp2_approx(row_max[h] - base);
      row_max[h] = new_max;
      float sum = row_sum[h] * correction;
#pragma unroll
      for (int d = 0; d < kDAtoms; ++d) {
        o[d][2 * h] *= correction;
        o[d][2 * h + 1] *= correction;
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = exp2_approx(fmaf(s[j][2 * h + e], p.scale_log2, -base));
          s[j][2 * h + e] = pr;
          sum += pr;
        }
      }
      row_sum[h] = sum;
    }
    const std::uint32_t a[4] = {E::pack(s[0][0], s[0][1]), E::pack(s[0][2], s[0][3]),
                                E::pack(s[1][0], s[1][1]), E::pack(s[1][2], s[1][3])};
#pragma unroll
    for (int np = 0; np < kDAtoms / 2; ++np) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, s_v_warp + Sw::at(v_lane, 0, np * 2));
      const std::uint32_t b_lo[2] = {b[0], b[1]};
      const std::uint32_t b_hi[2] = {b[2], b[3]};
      E::mma(o[2 * np], a, b_lo);
      E::mma(o[2 * np + 1], a, b_hi);
    }
    if (++cu.block == cu.num_blocks()) {
      // The unit's last block: each warp's rows to the merge buffers (as at
      // the end of DecodeTile::accumulate), then DecodeTile's merge and write.
      // The buffers are free: the previous unit's merge read them before
      // this iteration's __syncthreads.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = lane / 4 + 8 * h;
        float* dst =
            Tile::merge_o(smem) + (warp * kRows + row) * Tile::kMergeStride + (lane % 4) * 2;
#pragma unroll
        for (int d = 0; d < kDAtoms; ++d) {
          *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * h], o[d][2 * h + 1]);
        }
        const float sum = quad_sum(row_sum[h]);
        if (lane % 4 == 0) {
          Tile::merge_max(smem)[warp * kRows + row] = row_max[h];
          Tile::merge_sum(smem)[warp * kRows + row] = sum;
        }
      }
      __syncthreads();
      Tile::merge_and_write(p, cu.item, kv_head_of(cu.unit), chunk_of(cu.unit), smem, tid);
      open(cu, cu.unit + stride);
    }
  }
  cp_async_wait<0>();  // only empty groups are left
}

template <typename T, int kHeadDim>
Status prepare() {
  VPOD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(decode_deep_kernel<T, kHeadDim>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 DeepTile<T, kHeadDim>::kSmemBytes),
                            StatusCode::internal);
  VPOD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(decode_stream_kernel<T, kHeadDim>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 StreamLayout<T, kHeadDim>::kSmemBytes),
                            StatusCode::internal);
  return Status();
}

// Whether the current device gives a CTA the kernel's shared memory (opt-in
// limit; an H100/H200 does, an A100 does not for head_dim 128).
template <typename T, int kHeadDim>
bool supported() {
  static const bool ok = [] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return optin >= DeepTile<T, kHeadDim>::kSmemBytes &&
           optin >= StreamLayout<T, kHeadDim>::kSmemBytes && prepare<T, kHeadDim>().ok();
  }();
  return ok;
}

template <typename T>
Result<bool> deep_supported_typed(int head_dim) {
  bool ok = false;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, { ok = supported<T, kHeadDim>(); });
  return ok;
}

// VPOD_ATTENTION_DECODE_STREAM=0: one CTA per unit even beyond the SM count (comparison).
bool stream_disabled() {
  static const bool off = env_is("VPOD_ATTENTION_DECODE_STREAM", "0");
  return off;
}

template <typename T>
Status deep_launch_typed(const AttentionParams& params, int head_dim, bool unsplit,
                         cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (!supported<T, kHeadDim>()) {
      return failed_precondition("the deep decode kernel's shared memory exceeds this device's");
    }
    static const int num_sms = [] {
      int device = 0, sms = 0;
      if (cudaGetDevice(&device) != cudaSuccess ||
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
      }
      return sms;
    }();
    const long long units = static_cast<long long>(params.num_kv_heads) *
                            params.decode_head_chunks * params.num_decode_items;
    if (unsplit && num_sms > 0 && units > num_sms && !stream_disabled()) {
      // More units than SMs: one streaming CTA per SM.
      decode_stream_kernel<T, kHeadDim>
          <<<num_sms, kAttentionThreads, StreamLayout<T, kHeadDim>::kSmemBytes, stream>>>(params);
      VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
      return Status();
    }
    const dim3 grid(static_cast<unsigned>(params.num_kv_heads * params.decode_head_chunks),
                    static_cast<unsigned>(params.num_decode_items));
    decode_deep_kernel<T, kHeadDim>
        <<<grid, kAttentionThreads, DeepTile<T, kHeadDim>::kSmemBytes, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Result<int> deep_ctas_per_sm_typed(int head_dim) {
  int ctas = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (!supported<T, kHeadDim>()) return 0;
    VPOD_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                  &ctas, decode_deep_kernel<T, kHeadDim>, kAttentionThreads,
                                  DeepTile<T, kHeadDim>::kSmemBytes),
                              StatusCode::internal);
  });
  return ctas;
}

}  // namespace
}  // namespace device

namespace detail {

bool decode_deep_supported(DType dtype, int head_dim) {
  const Result<bool> ok = dtype == DType::f16
                              ? device::deep_supported_typed<half>(head_dim)
                              : device::deep_supported_typed<__nv_bfloat16>(head_dim);
  return ok.ok() && *ok;
}

Status launch_decode_deep(const AttentionParams& params, DType dtype, int head_dim, bool unsplit,
                          cudaStream_t stream) {
  return dtype == DType::f16
             ? device::deep_launch_typed<half>(params, head_dim, unsplit, stream)
             : device::deep_launch_typed<__nv_bfloat16>(params, head_dim, unsplit, stream);
}

Result<int> decode_deep_ctas_per_sm(DType dtype, int head_dim) {
  return dtype == DType::f16 ? device::deep_ctas_per_sm_typed<half>(head_dim)
                             : device::deep_ctas_per_sm_typed<__nv_bfloat16>(head_dim);
}

}  // namespace detail
}  // namespace vpod::attention
