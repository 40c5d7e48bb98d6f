// The sm_90a prefill tile: the same FlashAttention-2 forward as PrefillTile
// (128 query rows of one head against a key range, keys in blocks of 64,
// visited last to first, online softmax in the log2 domain), with the two
// matrix products on Hopper's warpgroup MMA (wgmma) instead of mma.sync:
//
//   S = Q K^T   wgmma m64n64k16, Q and K straight from shared memory (no
//               ldmatrix), one m64 half of the 128 rows per instruction;
//   O += P V    wgmma m64n{D}k16, P from registers (the S accumulator layout
//               is the A fragment layout), V from shared memory, transposed
//               by the descriptor (V rows stay as loaded).
//
// One warpgroup (128 threads) per CTA. Warp w owns rows 16w..16w+15 of each
// m64 half, i.e. rows {16w + r, 64 + 16w + r}. Q, K and V sit in shared
// memory in the canonical 128-byte-swizzle layout: 64-element column blocks,
// each [rows][128 B] with the 16-byte chunk index XOR (row % 8), 1024-byte
// aligned. cp.async fills them (with zero-fill past the ends), so every
// buffer is fenced to the async proxy before a wgmma reads it.
//
// Numerics equal PrefillTile's up to the order of the fp32 accumulation
// inside each product. K/V are contiguous (a vAttention view; a paged cache
// runs FlashInfer's kernels).
//
// With TMA descriptors (AttentionParams::kv_tma): every key block after the
// first visited one is a whole 64-key block inside the sequence's mapped
// tokens, so one thread loads it with four TMA copies (K and V, two 64-dim
// column blocks each, landing in the swizzled layout above) that complete on
// the stage's mbarrier; the warps issue no loads. The first block (possibly
// partial: keys past kv_end must read as zero, not as whatever the virtual
// tensor holds there) uses cp.async.
//
// Compiled for sm_90a only (wgmma); other targets get a body that traps, and
// the launcher selects this kernel only where the device runs sm_90a code.
#pragma once

#include "kernels/attention/attention_device.cuh"
#include "kernels/attention/prefill_tile.cuh"

namespace vpod::attention::device {

// Launch-time switches of the wgmma tile (KernelOptions).
struct WgmmaKnobs {
  // Skip a half's O rescale when no row of the warp raised its maximum (the
  // correction is then ex2.approx(0), expected to be exactly 1; the GPU tests
  // check the result against the reference, not bitwise against rescaling).
  bool lazy_rescale = true;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VPOD_ATTENTION_HAVE_WGMMA 1
#endif

namespace wgmma {

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's completed generic-proxy writes (cp.async) to shared
// memory visible to the async proxy (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across
// the asynchronous MMA region.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ std::uint64_t make_desc(std::uint32_t addr, std::uint32_t lbo_bytes,
                                                   std::uint32_t sbo_bytes) {
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<std::uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<std::uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<std::uint64_t>(1) << 62;  // SWIZZLE_128B
  return d;
}

// Shared-memory mbarriers and TMA tensor loads.
__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialized mbarriers visible to the async proxy (the TMA unit).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives once and expects `bytes` of TMA traffic before the phase completes.
__device__ __forceinline__ void mbarrier_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One box of a 4D tensor (coordinates fastest first) into shared memory; the
// bytes count toward `bar`'s expected transactions.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const void* map, std::uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

template <typename T>
struct WgmmaOps;

#ifdef VPOD_ATTENTION_HAVE_WGMMA
// The wgmma wrappers of one element type: PTX names the type in the opcode,
// so the struct is written once and stamped for each type.
#define VPOD_WGMMA_OPS(ELEM, PTX)                                                                  \
  template <>                                                                                      \
  struct WgmmaOps<ELEM> {                                                                          \
    /* S = Q K^T over the first k step: D = A B, the accumulators are outputs */                   \
    /* only (no dependence on what the registers held before). */                                  \
    static __device__ __forceinline__ void ss_n64_first(float (&d)[32], std::uint64_t desc_a,      \
                                                        std::uint64_t desc_b) {                    \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\n"                                                                     \
          "setp.ne.b32 p, 0, 0;\n"                                                                 \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX                                \
          " "                                                                                      \
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                     \
          "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                          \
          : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),    \
            "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]),             \
            "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]),          \
            "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]),          \
            "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]),          \
            "=f"(d[31])                                                                            \
          : "l"(desc_a), "l"(desc_b));                                                             \
    }                                                                                              \
    /* S = Q K^T: A and B K-major in shared memory. */                                             \
    static __device__ __forceinline__ void ss_n64(float (&d)[32], std::uint64_t desc_a,            \
                                                  std::uint64_t desc_b, int scale_d) {             \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\n"                                                                     \
          "setp.ne.b32 p, %34, 0;\n"                                                               \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX                                \
          " "                                                                                      \
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                     \
          "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                          \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),    \
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
            "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
            "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
            "+f"(d[31])                                                                            \
          : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                               \
    }                                                                                              \
    /* S = Q K^T over 128 keys (the warp-specialized tile, prefill_ws.cuh); _first: */             \
    /* the accumulators are outputs only. */                                                       \
    static __device__ __forceinline__ void ss_n128_first(float (&d)[64], std::uint64_t desc_a,     \
                                                         std::uint64_t desc_b) {                   \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\n"                                                                     \
          "setp.ne.b32 p, 0, 0;\n"                                                                 \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX                               \
          " "                                                                                      \
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
          "%36, "                                                                                  \
          "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "  \
          "%54, "                                                                                  \
          "%55, %56, %57, %58, %59, %60, %61, %62, %63}, "                                         \
          "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                          \
          : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),    \
            "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]),             \
            "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]),          \
            "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]),          \
            "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]),          \
            "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]),          \
            "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]),          \
            "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]),          \
            "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]),          \
            "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]),          \
            "=f"(d[61]), "=f"(d[62]), "=f"(d[63])                                                  \
          : "l"(desc_a), "l"(desc_b));                                                             \
    }                                                                                              \
    static __device__ __forceinline__ void ss_n128(float (&d)[64], std::uint64_t desc_a,           \
                                                   std::uint64_t desc_b) {                         \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\n"                                                                     \
          "setp.ne.b32 p, 1, 0;\n"                                                                 \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX                               \
          " "                                                                                      \
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
          "%36, "                                                                                  \
          "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "  \
          "%54, "                                                                                  \
          "%55, %56, %57, %58, %59, %60, %61, %62, %63}, "                                         \
          "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                          \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),    \
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
            "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
            "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
            "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),          \
            "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),          \
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),          \
            "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),          \
            "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),          \
            "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                  \
          : "l"(desc_a), "l"(desc_b));                                                             \
    }                                                                                              \
    /* O += P V: A (P) in registers, B (V) MN-major in shared memory (transposed). */              \
    static __device__ __forceinline__ void rs_n64(float (&d)[32], const std::uint32_t (&a)[4],     \
                                                  std::uint64_t desc_b, int scale_d) {             \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\n"                                                                     \
          "setp.ne.b32 p, %37, 0;\n"                                                               \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX                                \
          " "                                                                                      \
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                     \
          "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                            \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),    \
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
            "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
            "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
            "+f"(d[31])                                                                            \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                \
    }                                                                                              \
    static __device__ __forceinline__ void rs_n128(float (&d)[64], const std::uint32_t (&a)[4],    \
                                                   std::uint64_t desc_b, int scale_d) {            \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\n"                                                                     \
          "setp.ne.b32 p, %69, 0;\n"                                                               \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX                               \
          " "                                                                                      \
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
          "%36, "                                                                                  \
          "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "  \
          "%54, "                                                                                  \
          "%55, %56, %57, %58, %59, %60, %61, %62, %63}, "                                         \
          "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                            \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),    \
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
            "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
            "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
            "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),          \
            "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),          \
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),          \
            "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),          \
            "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),          \
            "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                  \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                \
    }                                                                                              \
  };

VPOD_WGMMA_OPS(half, "f16")
VPOD_WGMMA_OPS(__nv_bfloat16, "bf16")
#undef VPOD_WGMMA_OPS

#endif  // VPOD_ATTENTION_HAVE_WGMMA

}  // namespace wgmma

template <typename T, int kHeadDim>
struct PrefillWgmmaTile {
  static constexpr int kBlockM = kPrefillBlockM;  // 128: two m64 halves
  static constexpr int kBlockN = kPrefillBlockN;  // 64 keys
  static constexpr int kThreads = kAttentionThreads;
  static constexpr int kKSteps = kHeadDim / 16;  // k steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;   // k steps of P V
  static constexpr int kSAcc = kBlockN / 2;      // S floats per thread per half
  static constexpr int kOAcc = kHeadDim / 2;     // O floats per thread per half
  static constexpr int kRowChunks = kHeadDim / 8;
  static constexpr int kPass = kThreads / kRowChunks;  // rows one pass of the CTA loads
  static constexpr int kSmemQ = kBlockM * kHeadDim * 2;
  static constexpr int kSmemKV = kBlockN * kHeadDim * 2;
  // Q, then two stages of K and V (block j computes from one while block
  // j - 1 lands in the other), then the stages' two mbarriers (TMA); + 1024:
  // the dynamic shared memory is re-aligned to the swizzle atom.
  static constexpr int kSmemStage = 2 * kSmemKV;
  static constexpr int kSmemBarriers = 16;
  static constexpr int kSmemBytes = kSmemQ + 2 * kSmemStage + kSmemBarriers + 1024;
  using E = ElementTraits<T>;
  using Staging = SwizzledTile<kHeadDim>;
  static_assert(kHeadDim % 64 == 0 && kPass % 8 == 0, "rows of whole 128-byte column blocks");
  static_assert(kBlockM == 128 && kBlockN == 64 && kThreads == 128, "one warpgroup, m64 x 2");

  // Byte offset of 16-byte chunk `chunk` of row `row` in a tile of kRows rows.
  template <int kRows>
  static __device__ __forceinline__ std::uint32_t offset(int row, int chunk) {
    return static_cast<std::uint32_t>((chunk / 8) * kRows * 128 + row * 128 +
                                      (((chunk % 8) ^ (row % 8)) * 16));
  }

  // Loads key block [key0, key0 + 64) (K or V); keys >= kv_end are zero-filled.
  static __device__ __forceinline__ void load_keys(std::uint32_t dst, const T* base,
                                                   const KvAddressing& kv, int slot, int kv_head,
                                                   int key0, int kv_end, int tid) {
    const int chunk = tid % kRowChunks;
    const int row0 = tid / kRowChunks;
    const std::uint32_t dst0 = dst + offset<kBlockN>(row0, chunk);
    const T* src = base + static_cast<std::int64_t>(slot) * kv.outer_stride +
                   static_cast<std::int64_t>(kv_head) * kv.head_stride +
                   static_cast<std::int64_t>(key0 + row0) * kv.token_stride + chunk * 8;
    const std::int64_t step = static_cast<std::int64_t>(kPass) * kv.token_stride;
#pragma unroll
    for (int i = 0; i < kBlockN / kPass; ++i) {
      const bool valid = key0 + row0 + i * kPass < kv_end;
      cp_async_16(dst0 + i * kPass * 128, valid ? src + i * step : base, valid);
    }
  }

  // Row of the tile held by accumulator slot (half mh, h) of lane `lane` in warp `warp`.
  static __device__ __forceinline__ int tile_row(int mh, int warp, int lane, int h) {
    return mh * 64 + warp * 16 + lane / 4 + 8 * h;
  }

  // Masks, then folds one m64 half's S block (64 keys) into that half's
  // online softmax: rescales its O and running sum, and leaves P (exp2 of the
  // scaled scores) in the A fragment layout of each 16-key k step. The max
  // moves only past `slack` (AttentionParams::max_slack), so most blocks
  // leave O unscaled.
  static __device__ __forceinline__ void softmax_half(float (&s)[kSAcc], float (&o)[kOAcc],
                                                      float (&row_max)[2], float (&row_sum)[2],
                                                      std::uint32_t (&pa)[kPSteps][4], int mh,
                                                      int key0, int causal_row0, int kv_end,
                                                      float scale_log2, float slack, int warp,
                                                      int lane, bool lazy_rescale) {
    // Mask keys past the split's end and above the causal diagonal.
    const int warp_row0 = mh * 64 + warp * 16;
    if (key0 + kBlockN > kv_end || key0 + kBlockN - 1 > causal_row0 + warp_row0) {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = warp_row0 + lane / 4 + 8 * (e / 2);
          const int key = key0 + j * 8 + (lane % 4) * 2 + (e & 1);
          if (key >= kv_end || key > causal_row0 + row) s[4 * j + e] = -INFINITY;
        }
      }
    }
    // Online softmax (see prefill_tile.cuh for the -inf guard).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float block_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        block_max = fmaxf(block_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      }
      block_max = quad_max(block_max) * scale_log2;
      const float new_max = block_max > row_max[h] + slack ? block_max : row_max[h];
      const float base = new_max == -INFINITY ? 0.f : new_max;
      const float correction = exp2_approx(row_max[h] - base);
      row_max[h] = new_max;
      float sum = row_sum[h] * correction;
      if (!lazy_rescale || __any_sync(0xffffffffu, correction != 1.f)) {
#pragma unroll
        for (int d = 0; d < kHeadDim / 8; ++d) {
          o[4 * d + 2 * h] *= correction;
          o[4 * d + 2 * h + 1] *= correction;
        }
      }
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -base));
          s[4 * j + 2 * h + e] = pr;
          sum += pr;
        }
      }
      row_sum[h] = sum;
    }
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      pa[kk][0] = E::pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = E::pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = E::pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = E::pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

#ifdef VPOD_ATTENTION_HAVE_WGMMA
  // Issues O += P V for one m64 half (the caller fences and commits).
  static __device__ __forceinline__ void pv_half(float (&o)[kOAcc],
                                                 const std::uint32_t (&pa)[kPSteps][4],
                                                 std::uint64_t desc_v) {
    using Ops = wgmma::WgmmaOps<T>;
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      const std::uint64_t b = desc_v + ((kk * 16 * 128) >> 4);
      if constexpr (kHeadDim == 128) {
        Ops::rs_n128(o, pa[kk], b, 1);
      } else {
        Ops::rs_n64(o, pa[kk], b, 1);
      }
    }
  }
#endif

  static __device__ void run(const AttentionParams& p, const PrefillWorkItem& item, int q_head,
                             char* smem_raw, int tid, const WgmmaKnobs& knobs) {
#ifdef VPOD_ATTENTION_HAVE_WGMMA
    using Ops = wgmma::WgmmaOps<T>;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const SequenceDesc seq = p.plan.prefill_seqs[item.seq];
    const int kv_head = q_head / p.group_size;
    const int num_rows = min(kBlockM, seq.num_new - item.q_begin);
    const std::uint32_t raw = smem_addr(smem_raw);
    const std::uint32_t s_q = (raw + 1023u) & ~1023u;
    char* smem = smem_raw + (s_q - raw);
    // Stage j % 2 holds key block j: K, then V.
    const std::uint32_t s_kv = s_q + kSmemQ;
    const T* k_base = static_cast<const T*>(p.kv.k);
    const T* v_base = static_cast<const T*>(p.kv.v);

    // Q tile (rows past the chunk are zero) and the last key block.
    {
      const T* q_tile =
          static_cast<const T*>(p.q) +
          static_cast<std::int64_t>(seq.token_offset + item.q_begin) * p.q_token_stride +
          static_cast<std::int64_t>(q_head) * kHeadDim;
      const int chunk = tid % kRowChunks;
      const int row0 = tid / kRowChunks;
      const std::uint32_t dst0 = s_q + offset<kBlockM>(row0, chunk);
#pragma unroll
      for (int i = 0; i < kBlockM / kPass; ++i) {
        const int row = row0 + i * kPass;
        const bool valid = row < num_rows;
        cp_async_16(dst0 + i * kPass * 128,
                    valid ? q_tile + static_cast<std::int64_t>(row) * p.q_token_stride + chunk * 8
                          : static_cast<const T*>(p.q),
                    valid);
      }
    }
    const int block_min = item.kv_begin / kBlockN;
    const int block_end = (item.kv_end + kBlockN - 1) / kBlockN;
    // K/V stream through two stages, each block's K and V loaded a whole
    // block ahead; TMA for the blocks after the first where descriptors exist.
    const bool tma = p.kv_tma.valid != 0;
    const std::uint32_t s_bar = s_kv + 2 * kSmemStage;  // mbarrier of stage s: s_bar + 8 s
    if (tma && tid == 0) {
      wgmma::mbarrier_init(s_bar, 1);
      wgmma::mbarrier_init(s_bar + 8, 1);
      wgmma::fence_mbarrier_init();  // visible to every thread after the first __syncthreads
    }
    std::uint32_t parity = 0;  // bit s: parity of the next phase stage s's barrier completes
    const int first = block_end - 1;
    const std::uint32_t first_stage = s_kv + (first & 1) * kSmemStage;
    load_keys(first_stage, k_base, p.kv, seq.slot, kv_head, first * kBlockN, item.kv_end, tid);
    load_keys(first_stage + kSmemKV, v_base, p.kv, seq.slot, kv_head, first * kBlockN, item.kv_end,
              tid);
    cp_async_commit();

    float o[2][kOAcc];
    float row_max[2][2];  // running max of the scaled scores (log2 domain)
    float row_sum[2][2];  // this thread's part of the running sum of exp2
#pragma unroll
    for (int mh = 0; mh < 2; ++mh) {
#pragma unroll
      for (int i = 0; i < kOAcc; ++i) o[mh][i] = 0.f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mh][h] = -INFINITY;
        row_sum[mh][h] = 0.f;
      }
    }
    // K-major operands (Q, K): LBO unused (1), SBO = 8 rows of 128 bytes.
    const std::uint64_t desc_q = wgmma::make_desc(s_q, 16, 1024);
    const std::uint64_t desc_k0 = wgmma::make_desc(s_kv, 16, 1024);
    // V, transposed (MN-major): the next 64 dims a column block further (LBO),
    // the next 8 keys 1024 bytes (SBO).
    const std::uint64_t desc_v0 = wgmma::make_desc(s_kv + kSmemKV, kPrefillBlockN * 128, 1024);
    const std::uint64_t desc_k1 = wgmma::make_desc(s_kv + kSmemStage, 16, 1024);
    const std::uint64_t desc_v1 =
        wgmma::make_desc(s_kv + kSmemStage + kSmemKV, kPrefillBlockN * 128, 1024);
    const int causal_row0 = seq.cached_len + item.q_begin;

    // One key block, software-pipelined across the two m64 halves so that the
    // tensor cores work while the warps run a softmax:
    //   issue S0 = Q0 K^T, S1 = Q1 K^T | softmax(S0) while S1 runs |
    //   issue O0 += P0 V | softmax(S1) while P0 V runs | issue O1 += P1 V.
    // (Letting O1 += P1 V run on into the next block's S makes ptxas
    // serialize every wgmma of the loop: C7513.)
    // A half's softmax touches only that half's S, O and row statistics, none
    // of which an MMA still in flight writes (the waits below guarantee it).
    std::uint32_t pa[2][kPSteps][4];  // P of a half, in the A fragment layout
    for (int block = block_end - 1; block >= block_min; --block) {
      if (tma && block != first) {
        const int stage = block & 1;
        wgmma::mbarrier_wait(s_bar + 8 * stage, (parity >> stage) & 1u);
        parity ^= 1u << stage;
      } else {
        cp_async_wait<0>();
        wgmma::fence_proxy_async();
      }
      // K and V of this block landed; every MMA of the last block (which read
      // the other stage) is done, so the next block may load into it.
      __syncthreads();
      if (block > block_min) {
        const int stage = (block - 1) & 1;
        const std::uint32_t next = s_kv + stage * kSmemStage;
        const int key0 = (block - 1) * kBlockN;
        if (tma) {
          if (tid == 0) {
            const std::uint32_t bar = s_bar + 8 * stage;
            wgmma::mbarrier_expect_tx(bar, 2 * kSmemKV);
#pragma unroll
            for (int cb = 0; cb < kHeadDim / 64; ++cb) {
              wgmma::tma_load_4d(next + cb * kBlockN * 128, &p.kv_tma.k, bar, cb * 64, kv_head,
                                 key0, seq.slot);
              wgmma::tma_load_4d(next + kSmemKV + cb * kBlockN * 128, &p.kv_tma.v, bar, cb * 64,
                                 kv_head, key0, seq.slot);
            }
          }
        } else {
          load_keys(next, k_base, p.kv, seq.slot, kv_head, key0, item.kv_end, tid);
          load_keys(next + kSmemKV, v_base, p.kv, seq.slot, kv_head, key0, item.kv_end, tid);
          cp_async_commit();
        }
      }
      const bool odd = (block & 1) != 0;
      const std::uint64_t desc_k = odd ? desc_k1 : desc_k0;
      const std::uint64_t desc_v = odd ? desc_v1 : desc_v0;

      // S = Q K^T: 128 rows (two m64 halves, one commit group each) x 64 keys.
      float s[2][kSAcc];
      wgmma::fence();
#pragma unroll
      for (int mh = 0; mh < 2; ++mh) {
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          const std::uint32_t a_off = (ks / 4) * kBlockM * 128 + mh * 64 * 128 + (ks % 4) * 32;
          const std::uint32_t b_off = (ks / 4) * kBlockN * 128 + (ks % 4) * 32;
          if (ks == 0) {
            Ops::ss_n64_first(s[mh], desc_q + (a_off >> 4), desc_k + (b_off >> 4));
          } else {
            Ops::ss_n64(s[mh], desc_q + (a_off >> 4), desc_k + (b_off >> 4), 1);
          }
        }
        wgmma::commit();
      }
      const int key0 = block * kBlockN;

      wgmma::wait<1>();  // S0 done; S1 may still run
      wgmma::fence_operands(s[0]);
      softmax_half(s[0], o[0], row_max[0], row_sum[0], pa[0], 0, key0, causal_row0, item.kv_end,
                   p.scale_log2, p.max_slack, warp, lane, knobs.lazy_rescale);

      // O0 += P0 V runs while the warps compute P1.
      wgmma::fence_operands(o[0]);
      wgmma::fence();
      pv_half(o[0], pa[0], desc_v);
      wgmma::commit();
      wgmma::wait<1>();  // S1 done; O0 += P0 V may still run
      wgmma::fence_operands(s[1]);
      softmax_half(s[1], o[1], row_max[1], row_sum[1], pa[1], 1, key0, causal_row0, item.kv_end,
                   p.scale_log2, p.max_slack, warp, lane, knobs.lazy_rescale);
      wgmma::fence_operands(o[1]);
      wgmma::fence();
      pv_half(o[1], pa[1], desc_v);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(o[0]);
      wgmma::fence_operands(o[1]);
    }

#pragma unroll
    for (int mh = 0; mh < 2; ++mh) {
#pragma unroll
      for (int h = 0; h < 2; ++h) row_sum[mh][h] = quad_sum(row_sum[mh][h]);
    }

    if (item.partial_row < 0) {
      // Normalize, convert, stage this warp's 32 rows in the Q tile's memory
      // (every wgmma reading Q has completed) and write them with 16-byte stores.
#pragma unroll
      for (int mh = 0; mh < 2; ++mh) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float sum = row_sum[mh][h];
          const float inv = sum > 0.f ? 1.f / sum : 0.f;
          const int row = tile_row(mh, warp, lane, h);
#pragma unroll
          for (int d = 0; d < kHeadDim / 8; ++d) {
            const int col = d * 8 + (lane % 4) * 2;
            *reinterpret_cast<std::uint32_t*>(smem + Staging::offset(row, col / 8) +
                                              (col % 8) * 2) =
                E::pack(o[mh][4 * d + 2 * h] * inv, o[mh][4 * d + 2 * h + 1] * inv);
          }
        }
      }
      __syncwarp();
      constexpr int kRowsPerPass = 32 / Staging::kRowChunks;
      T* out_tile =
          static_cast<T*>(p.out) +
          static_cast<std::int64_t>(seq.token_offset + item.q_begin) * p.out_token_stride +
          static_cast<std::int64_t>(q_head) * kHeadDim;
#pragma unroll
      for (int pass = 0; pass < 32 / kRowsPerPass; ++pass) {
        const int local = pass * kRowsPerPass + lane / Staging::kRowChunks;  // 0..31
        const int row = (local / 16) * 64 + warp * 16 + local % 16;
        const int chunk = lane % Staging::kRowChunks;
        if (row < num_rows) {
          *reinterpret_cast<uint4*>(out_tile + static_cast<std::int64_t>(row) * p.out_token_stride +
                                    chunk * 8) =
              *reinterpret_cast<const uint4*>(smem + Staging::offset(row, chunk));
        }
      }
    } else {
      // One KV split: fp32 normalized rows and their log2-sum-exp.
#pragma unroll
      for (int mh = 0; mh < 2; ++mh) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = tile_row(mh, warp, lane, h);
          if (row >= num_rows) continue;
          const float sum = row_sum[mh][h];
          const float inv = sum > 0.f ? 1.f / sum : 0.f;
          const std::int64_t prow =
              static_cast<std::int64_t>(item.partial_row + row) * p.num_q_heads + q_head;
          float* dst = p.plan.partial_o + prow * kHeadDim + (lane % 4) * 2;
#pragma unroll
          for (int d = 0; d < kHeadDim / 8; ++d) {
            *reinterpret_cast<float2*>(dst + d * 8) =
                make_float2(o[mh][4 * d + 2 * h] * inv, o[mh][4 * d + 2 * h + 1] * inv);
          }
          if (lane % 4 == 0) {
            p.plan.partial_lse[prow] = sum > 0.f ? row_max[mh][h] + __log2f(sum) : -INFINITY;
          }
        }
      }
    }
#else
    (void)p, (void)item, (void)q_head, (void)smem_raw, (void)tid, (void)knobs;
    __trap();  // the launcher never selects this kernel without sm_90a code
#endif
  }
};

// One prefill tile (work item `item`, query head `q_head`) on the 128 threads
// of the calling CTA, which all call it (it synchronizes with __syncthreads)
// and own `smem` (PrefillWgmmaTile::kSmemBytes): the fused POD kernel
// (pod_kernel.cuh) runs it, and so does the standalone kernel below.
template <typename T, int kHeadDim>
__device__ __forceinline__ void run_prefill_wgmma_tile(const AttentionParams& params,
                                                       const PrefillWorkItem& item, int q_head,
                                                       char* smem, int tid,
                                                       const WgmmaKnobs& knobs) {
  PrefillWgmmaTile<T, kHeadDim>::run(params, item, q_head, smem, tid, knobs);
}

// The standalone one-warpgroup prefill kernel: grid (query heads, items).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kPrefillCtasPerSm)
    prefill_wgmma_kernel(const __grid_constant__ AttentionParams params, const WgmmaKnobs knobs) {
  extern __shared__ __align__(128) char smem[];
  const PrefillWorkItem item = params.plan.prefill_items[blockIdx.y];
  PrefillWgmmaTile<T, kHeadDim>::run(params, item, static_cast<int>(blockIdx.x), smem,
                                     static_cast<int>(threadIdx.x), knobs);
}

}  // namespace vpod::attention::device
