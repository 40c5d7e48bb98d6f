// RoPE on q and k fused with the append of k and v to the KV cache: one CTA
// per token; the rotated k is written to the cache (and back in place, for
// attention kernels that read the step's k directly). fp16/bf16 heads with
// 16-byte aligned rows go through the chunked kernel: the token's cos/sin
// table is computed once into shared memory (not once per head), and each
// thread rotates eight pairs with 16-byte loads and stores.
#include "common/cuda_check.h"
#include "kernels/dtype_dispatch.cuh"
#include "kernels/pdl.cuh"
#include "kernels/rope/rope.h"

namespace vpod::kernels {

namespace {

struct RopeKernelParams {
  void* q;  // [T, q_heads, D] at q_stride
  void* k;  // [T, kv_heads, D] at k_stride
  const void* v;
  std::int64_t q_stride, k_stride, v_stride;
  const std::int32_t* positions;
  const std::int32_t* slots;
  const std::int32_t* kv_index;
  const float* inv_freq;
  void* cache_k;
  void* cache_v;
  std::int64_t slot_stride, token_stride, head_stride;
  // Contiguous: slot_stride is the KvLayerView's. Paged: slot_stride is the
  // PagedKvView's block_stride, block_table [slots, table_stride] its table.
  const std::int32_t* block_table;  // null: contiguous
  int table_stride, block_shift;
  int q_heads, kv_heads, head_dim;
  bool early_trigger;
};

// Element offset of a token's row in the cache (contiguous or paged).
__device__ __forceinline__ std::int64_t cache_row_of(const RopeKernelParams& p, int slot,
                                                     int index) {
  if (p.block_table == nullptr) {
    return slot * p.slot_stride + static_cast<std::int64_t>(index) * p.token_stride;
  }
  const std::int64_t block =
      p.block_table[static_cast<std::int64_t>(slot) * p.table_stride + (index >> p.block_shift)];
  return block * p.slot_stride +
         static_cast<std::int64_t>(index & ((1 << p.block_shift) - 1)) * p.token_stride;
}

template <typename T>
__global__ void rope_kv_append_kernel(const __grid_constant__ RopeKernelParams p) {
  if (p.early_trigger) pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x;
  const int half = p.head_dim / 2;
  const float pos = static_cast<float>(p.positions[t]);
  const int slot = p.slots[t];
  const std::int64_t cache_row = slot >= 0 ? cache_row_of(p, slot, p.kv_index[t]) : 0;
  T* q = static_cast<T*>(p.q) + t * p.q_stride;
  T* k = static_cast<T*>(p.k) + t * p.k_stride;
  const T* v = static_cast<const T*>(p.v) + t * p.v_stride;
  T* ck = static_cast<T*>(p.cache_k);
  T* cv = static_cast<T*>(p.cache_v);
  // Rotation pairs (head, i) for q heads then k heads.
  const int pairs = (p.q_heads + p.kv_heads) * half;
  for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const int head = idx / half;
    const int i = idx % half;
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    const bool is_q = head < p.q_heads;
    const int h = is_q ? head : head - p.q_heads;
    T* x = (is_q ? q : k) + static_cast<std::int64_t>(h) * p.head_dim;
    const float a = to_float(x[i]);
    const float b = to_float(x[i + half]);
    const T ra = from_float<T>(a * c - b * s);
    const T rb = from_float<T>(b * c + a * s);
    x[i] = ra;
    x[i + half] = rb;
    if (!is_q && slot >= 0) {
      T* dst = ck + cache_row + static_cast<std::int64_t>(h) * p.head_stride;
      dst[i] = ra;
      dst[i + half] = rb;
    }
  }
  if (slot < 0) return;
  for (int idx = threadIdx.x; idx < p.kv_heads * p.head_dim; idx += blockDim.x) {
    const int h = idx / p.head_dim;
    const int d = idx % p.head_dim;
    cv[cache_row + static_cast<std::int64_t>(h) * p.head_stride + d] = v[idx];
  }
}

constexpr int kMaxHalf = 256;  // head_dim <= 512

template <typename T>
__global__ void rope_kv_append_vec_kernel(const __grid_constant__ RopeKernelParams p) {
  __shared__ float2 cos_sin[kMaxHalf];
  if (p.early_trigger) pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x;
  const int half = p.head_dim / 2;
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    cos_sin[i] = make_float2(c, s);
  }
  const int slot = p.slots[t];
  const std::int64_t cache_row = slot >= 0 ? cache_row_of(p, slot, p.kv_index[t]) : 0;
  T* q = static_cast<T*>(p.q) + t * p.q_stride;
  T* k = static_cast<T*>(p.k) + t * p.k_stride;
  const T* v = static_cast<const T*>(p.v) + t * p.v_stride;
  __syncthreads();
  // Tasks (head, g): eight rotation pairs (i, i + half), i = 8g .. 8g + 7, for
  // q heads then k heads.
  const int groups = half / 8;
  const int tasks = (p.q_heads + p.kv_heads) * groups;
  for (int idx = threadIdx.x; idx < tasks; idx += blockDim.x) {
    const int head = idx / groups;
    const int i0 = (idx % groups) * 8;
    const bool is_q = head < p.q_heads;
    const int h = is_q ? head : head - p.q_heads;
    T* x = (is_q ? q : k) + static_cast<std::int64_t>(h) * p.head_dim;
    const Chunk8<T> a = *reinterpret_cast<const Chunk8<T>*>(x + i0);
    const Chunk8<T> b = *reinterpret_cast<const Chunk8<T>*>(x + i0 + half);
    Chunk8<T> ra, rb;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 cs = cos_sin[i0 + j];
      const float fa = to_float(a.v[j]);
      const float fb = to_float(b.v[j]);
      ra.v[j] = from_float<T>(fa * cs.x - fb * cs.y);
      rb.v[j] = from_float<T>(fb * cs.x + fa * cs.y);
    }
    *reinterpret_cast<Chunk8<T>*>(x + i0) = ra;
    *reinterpret_cast<Chunk8<T>*>(x + i0 + half) = rb;
    if (!is_q && slot >= 0) {
      T* dst =
          static_cast<T*>(p.cache_k) + cache_row + static_cast<std::int64_t>(h) * p.head_stride;
      *reinterpret_cast<Chunk8<T>*>(dst + i0) = ra;
      *reinterpret_cast<Chunk8<T>*>(dst + i0 + half) = rb;
    }
  }
  if (slot < 0) return;
  const int chunks = p.kv_heads * p.head_dim / 8;
  for (int idx = threadIdx.x; idx < chunks; idx += blockDim.x) {
    const int h = idx / (p.head_dim / 8);
    const int d = (idx % (p.head_dim / 8)) * 8;
    *reinterpret_cast<Chunk8<T>*>(static_cast<T*>(p.cache_v) + cache_row +
                                  static_cast<std::int64_t>(h) * p.head_stride + d) =
        *reinterpret_cast<const Chunk8<T>*>(v + static_cast<std::int64_t>(h) * p.head_dim + d);
  }
}

// Whether the chunked kernel applies: fp16/bf16, head_dim a multiple of 16
// (eight pairs per task) up to 512, and every row and head 16-byte aligned.
bool vectorizable(const RopeKernelParams& p, DType dtype) {
  const bool strides = p.q_stride % 8 == 0 && p.k_stride % 8 == 0 && p.v_stride % 8 == 0 &&
                       p.slot_stride % 8 == 0 && p.token_stride % 8 == 0 && p.head_stride % 8 == 0;
  return dtype != DType::f32 && p.head_dim % 16 == 0 && p.head_dim / 2 <= kMaxHalf && strides &&
         aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.cache_k) &&
         aligned16(p.cache_v);
}

}  // namespace

namespace {

// The step's fields of the kernel's parameters; the cache's are the caller's.
// `kv` is a KvLayerView or a PagedKvView (dtype, device, heads, head_dim).
template <typename Kv>
bool fill_step_params(const RopeKvAppendArgs& a, const Kv& kv, RopeKernelParams* out) {
  const TensorView& q = a.q;
  const TensorView& k = a.k;
  const TensorView& v = a.v;
  VPOD_CHECK_MSG(q.rank() == 3 && k.rank() == 3 && v.rank() == 3 && q.size(0) == k.size(0) &&
                     v.size(0) == k.size(0) && q.size(2) == kv.head_dim &&
                     k.size(2) == kv.head_dim && k.size(1) == kv.num_kv_heads &&
                     v.size(1) == kv.num_kv_heads && q.stride(1) == q.size(2) &&
                     k.stride(1) == k.size(2) && v.stride(1) == v.size(2) && q.stride(2) == 1,
                 "rope_kv_append_gpu shapes: q " + q.to_string() + ", k " + k.to_string());
  VPOD_CHECK_MSG(q.dtype() == kv.dtype && k.dtype() == kv.dtype && v.dtype() == kv.dtype &&
                     kv.device == Device::cuda,
                 "rope_kv_append_gpu: q/k/v and the cache must share one dtype on the GPU");
  if (q.size(0) == 0) return false;
  RopeKernelParams& p = *out;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_stride = q.stride(0);
  p.k_stride = k.stride(0);
  p.v_stride = v.stride(0);
  p.positions = a.positions;
  p.slots = a.slots;
  p.kv_index = a.kv_index;
  p.inv_freq = a.inv_freq;
  p.cache_k = kv.k;
  p.cache_v = kv.v;
  p.q_heads = static_cast<int>(q.size(1));
  p.kv_heads = kv.num_kv_heads;
  p.head_dim = kv.head_dim;
  p.early_trigger = a.launch.pdl_early_trigger;
  return true;
}

void launch(const RopeKvAppendArgs& a, const RopeKernelParams& p, cudaStream_t stream) {
  const int tokens = static_cast<int>(a.q.size(0));
  if (vectorizable(p, a.q.dtype())) {
    constexpr int kThreads = 128;
    VPOD_DISPATCH_DTYPE(a.q.dtype(), T, {
      VPOD_CUDA_CHECK(launch_kernel(&rope_kv_append_vec_kernel<T>, dim3(tokens), dim3(kThreads), 0,
                                    stream, a.launch.pdl, p));
    });
  } else {
    constexpr int kThreads = 256;
    VPOD_DISPATCH_DTYPE(a.q.dtype(), T, {
      VPOD_CUDA_CHECK(launch_kernel(&rope_kv_append_kernel<T>, dim3(tokens), dim3(kThreads), 0,
                                    stream, a.launch.pdl, p));
    });
  }
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_kv_append_gpu(const RopeKvAppendArgs& a, const KvLayerView& kv, cudaStream_t stream) {
  RopeKernelParams p{};
  if (!fill_step_params(a, kv, &p)) return;
  p.slot_stride = kv.slot_stride;
  p.token_stride = kv.token_stride;
  p.head_stride = kv.head_stride;
  launch(a, p, stream);
}

void rope_kv_append_gpu(const RopeKvAppendArgs& a, const PagedKvView& kv, cudaStream_t stream) {
  RopeKernelParams p{};
  if (!fill_step_params(a, kv, &p)) return;
  VPOD_CHECK_MSG(
      kv.block_table != nullptr && kv.block_size > 0 && (kv.block_size & (kv.block_size - 1)) == 0,
      "rope_kv_append_gpu: a paged cache needs a block table and a power-of-two "
      "block_size");
  p.slot_stride = kv.block_stride;
  p.token_stride = kv.token_stride;
  p.head_stride = kv.head_stride;
  p.block_table = kv.block_table;
  p.table_stride = kv.max_blocks_per_slot;
  p.block_shift = __builtin_ctz(static_cast<unsigned>(kv.block_size));
  launch(a, p, stream);
}

}  // namespace vpod::kernels
