// How fast N SMs can stream HBM into shared memory (docs/pod.md, "POD by SM
// partition"): each of N one-CTA-per-SM CTAs streams its own ~32 MB through
// 6 stages of 32 KB, by cp.async (LDGSTS) from 128 or 384 threads, or by 1D
// bulk copies (the TMA engine, cp.async.bulk) from one thread; no compute.
// Prints GB/s per SM and the total for N = 8 ... 132. A measurement tool, not
// part of the build:
//   nvcc -O3 -std=c++17 -arch=sm_90a -o sm_stream tools/attention/sm_stream.cu
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>

constexpr int kStages = 6;  // 5 in flight while one is read

__device__ __forceinline__ uint32_t saddr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, 1)
    ldgsts(const char* src, size_t per_cta, int stages, int stage_bytes, unsigned long long* sink) {
  extern __shared__ __align__(128) char smem[];
  const char* base = src + blockIdx.x * per_cta;
  const int blocks = (int)(per_cta / stage_bytes);
  const int chunks = stage_bytes / 16;
  auto load = [&](int b) {
    const char* s = base + (size_t)b * stage_bytes;
    uint32_t d = saddr(smem + (b % stages) * stage_bytes);
    for (int c = threadIdx.x; c < chunks; c += kThreads)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d + c * 16),
                   "l"(s + c * 16));
    asm volatile("cp.async.commit_group;\n");
  };
  for (int b = 0; b < stages - 1; ++b) load(b);
  unsigned long long acc = 0;
  for (int b = 0; b < blocks; ++b) {
    if (b + stages - 1 < blocks)
      load(b + stages - 1);
    else
      asm volatile("cp.async.commit_group;\n");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));  // block b has landed
    __syncthreads();
    acc += smem[(b % stages) * stage_bytes + threadIdx.x];
    __syncthreads();
  }
  asm volatile("cp.async.wait_all;\n");
  if (acc == 12345) *sink = acc;
}

__global__ void __launch_bounds__(128, 1)
    bulk(const char* src, size_t per_cta, int stages, int stage_bytes, unsigned long long* sink) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) unsigned long long bars[16];
  const char* base = src + blockIdx.x * per_cta;
  const int blocks = (int)(per_cta / stage_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s)
      asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(saddr(&bars[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n");
  }
  __syncthreads();
  auto load = [&](int b) {
    const int s = b % stages;
    uint32_t bar = saddr(&bars[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(stage_bytes));
    for (int off = 0; off < stage_bytes; off += 16384)
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];\n" ::"r"(saddr(smem + s * stage_bytes + off)),
          "l"(base + (size_t)b * stage_bytes + off), "r"(16384), "r"(bar)
          : "memory");
  };
  if (threadIdx.x == 0)
    for (int b = 0; b < stages && b < blocks; ++b) load(b);
  unsigned long long acc = 0;
  for (int b = 0; b < blocks; ++b) {
    const int s = b % stages;
    const uint32_t phase = (b / stages) & 1;
    asm volatile(
        "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::
            "r"(saddr(&bars[s])),
        "r"(phase));
    acc += smem[s * stage_bytes + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0 && b + stages < blocks) load(b + stages);
  }
  if (acc == 12345) *sink = acc;
}

int main() {
  const size_t total = 8ull << 30;
  char* src;
  cudaMalloc(&src, total);
  cudaMemset(src, 1, total);
  unsigned long long* sink;
  cudaMalloc(&sink, 8);
  const int stage_bytes = 32768;
  const int smem = kStages * stage_bytes;
  cudaFuncSetAttribute(ldgsts<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(ldgsts<384>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  printf("%-14s %5s %10s %12s %10s\n", "kernel", "ctas", "ms", "GB/s per SM", "TB/s");
  for (int n : {8, 16, 32, 48, 64, 96, 132}) {
    const size_t per = (size_t)(total / 132 / 2) / stage_bytes * stage_bytes;  // ~32 MB per CTA
    for (int k = 0; k < 3; ++k) {
      float best = 1e9;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(a);
        if (k == 0) ldgsts<128><<<n, 128, smem>>>(src, per, kStages, stage_bytes, sink);
        if (k == 1) ldgsts<384><<<n, 384, smem>>>(src, per, kStages, stage_bytes, sink);
        if (k == 2) bulk<<<n, 128, smem>>>(src, per, kStages, stage_bytes, sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (ms < best) best = ms;
      }
      const char* name[] = {"cp.async x128", "cp.async x384", "bulk (TMA)"};
      printf("%-14s %5d %10.4f %12.1f %10.3f\n", name[k], n, best, per / (best * 1e-3) / 1e9,
             n * per / (best * 1e-3) / 1e12);
    }
  }
  cudaError_t e = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e));
}
