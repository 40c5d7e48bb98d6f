// Device building blocks of the attention kernels: cp.async, ldmatrix,
// mma.sync m16n8k16 (sm_80 and later), the swizzled shared-memory tile layout,
// K/V addressing (contiguous or paged) and element-type traits.
//
// Fragment layouts of mma.m16n8k16 (lane = threadIdx.x % 32, g = lane / 4, t = lane % 4):
//   A (16x16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8,
//   2t+8..) B (16x8, k x n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g) C (16x8 fp32): c0,c1
//   = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention/attention_params.h"

namespace vpod::attention::device {

// ---------------------------------------------------------------------------
// Element types.
// ---------------------------------------------------------------------------
template <typename T>
struct ElementTraits;

template <>
struct ElementTraits<half> {
  // Two floats rounded to one register of two elements (low half = first).
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(std::uint32_t bits) {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct ElementTraits<__nv_bfloat16> {
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(std::uint32_t bits) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// ---------------------------------------------------------------------------
// Memory primitives.
// ---------------------------------------------------------------------------
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared; when !valid the 16 bytes are
// zero-filled and nothing is read (src may then be any mapped address).
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 2^x (ex2.approx: 2^-inf = +0, the property the -inf guards rely on).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------------------
// Swizzled tiles in shared memory: rows of kHeadDim 16-bit elements, stored as
// 16-byte chunks with chunk index XOR (row % 8). The 8 rows an ldmatrix phase
// reads then hit 8 distinct bank groups (conflict-free), for 64 or 128 dims.
// ---------------------------------------------------------------------------
template <int kHeadDim>
struct SwizzledTile {
  static constexpr int kRowChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = kRowChunks * 16;
  static_assert(kRowChunks >= 8, "the swizzle needs rows of at least 128 bytes");
  // Byte offset of 16-byte chunk `chunk` of row `row`.
  static __device__ __forceinline__ std::uint32_t offset(int row, int chunk) {
    return static_cast<std::uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) * 16));
  }
  // Operand addressing without per-load index math. A lane addresses row
  // row_c + row_lane, chunk chunk_c + chunk_lane, where row_c is a multiple of
  // 8 and chunk_c (compile-time in the unrolled loops) shares no bit with
  // chunk_lane. Then the swizzled offset is
  //   (lane_offset(row_lane, chunk_lane) ^ chunk_c * 16) + row_c * kRowBytes,
  // one XOR and an immediate add per load.
  static __device__ __forceinline__ std::uint32_t lane_offset(int row_lane, int chunk_lane) {
    return offset(row_lane, chunk_lane);
  }
  static __device__ __forceinline__ std::uint32_t at(std::uint32_t lane_off, int row_c,
                                                     int chunk_c) {
    return (lane_off ^ static_cast<std::uint32_t>(chunk_c * 16)) +
           static_cast<std::uint32_t>(row_c * kRowBytes);
  }
};

// Loads kRows rows of kHeadDim elements into a swizzled tile with all
// kThreads threads; row_src(row) gives the row's global address, or nullptr
// for a row to zero-fill. `fallback` is any mapped address.
template <int kRows, int kHeadDim, int kThreads, typename RowSource>
__device__ __forceinline__ void load_tile_async(std::uint32_t smem, int tid, const void* fallback,
                                                RowSource row_src) {
  using Tile = SwizzledTile<kHeadDim>;
  constexpr int kChunks = kRows * Tile::kRowChunks;
  constexpr int kRowsPerPass = kThreads / Tile::kRowChunks;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide among the threads");
  const int row0 = tid / Tile::kRowChunks;
  const int chunk = tid % Tile::kRowChunks;
  const std::uint32_t dst0 = smem + Tile::offset(row0, chunk);
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int row = row0 + i * kRowsPerPass;
    const char* src = static_cast<const char*>(row_src(row));
    // Passes of whole 8-row swizzle phases keep one offset pattern; fewer
    // rows per pass (64 threads, head dim 128) recompute it.
    const std::uint32_t dst = kRowsPerPass % 8 == 0 ? dst0 + i * kRowsPerPass * Tile::kRowBytes
                                                    : smem + Tile::offset(row, chunk);
    cp_async_16(dst, src != nullptr ? static_cast<const void*>(src + chunk * 16) : fallback,
                src != nullptr);
  }
}

// ---------------------------------------------------------------------------
// K/V addressing.
// ---------------------------------------------------------------------------
// Element offset of (slot, token, head) in the K or V cache: a contiguous
// view's slot stride, or a paged cache's block table (only the KV append
// writes pages; the attention kernels read contiguous views).
__device__ __forceinline__ std::int64_t kv_offset(const KvAddressing& kv, int slot, int token,
                                                  int head) {
  std::int64_t offset;
  if (kv.block_table == nullptr) {
    offset = static_cast<std::int64_t>(slot) * kv.outer_stride +
             static_cast<std::int64_t>(token) * kv.token_stride;
  } else {
    const int block =
        __ldg(kv.block_table + static_cast<std::int64_t>(slot) * kv.block_table_stride +
              (token >> kv.block_shift));
    const int in_block = token & ((1 << kv.block_shift) - 1);
    offset = static_cast<std::int64_t>(block) * kv.outer_stride +
             static_cast<std::int64_t>(in_block) * kv.token_stride;
  }
  return offset + static_cast<std::int64_t>(head) * kv.head_stride;
}

// Quad (4 lanes holding one accumulator row) reductions.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace vpod::attention::device
