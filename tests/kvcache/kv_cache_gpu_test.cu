// The vAttention KV cache on a real GPU (CUDA VMM provider):
//   - a kernel writes a pattern through both layouts' KvLayerViews for many
//     slots whose lengths straddle page boundaries; the host copies the raw
//     slot memory back and checks every element at the address the layout
//     definition gives ([slots, max_ctx, layers, heads, dim] or per layer);
//   - the mapper grows some slots and reclaims idle ones while a long kernel
//     keeps reading (and checking) other slots: no fault, no corruption;
//   - a slot released while a kernel still reads it is not unmapped until the
//     kernel finishes (the fence recorded on its stream).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <random>
#include <vector>

#include "common/cuda_check.h"
#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "cuda/device_buffer.h"
#include "cuda/stream.h"
#include "kvcache/cuda_vmm.h"
#include "kvcache/fault_injection.h"
#include "kvcache/kv_cache.h"
#include "kvcache/kv_probe.h"
#include "support/gpu.h"

namespace vpod::kvcache {
namespace {

constexpr int kMaxLayers = 8;

struct LayerViews {
  KvLayerView layer[kMaxLayers];
  int num_layers = 0;
};

// An integer pattern, exact in every dtype once masked (fp16 holds integers
// up to 2048 exactly, bf16 up to 256).
__host__ __device__ inline float pattern_value(std::uint32_t tag, int slot, std::int64_t token,
                                               int layer, int kv, int head, int d,
                                               std::uint32_t mask) {
  std::uint32_t h = tag * 2654435761u ^ static_cast<std::uint32_t>(slot) * 2246822519u ^
                    static_cast<std::uint32_t>(token) * 3266489917u ^
                    static_cast<std::uint32_t>(layer) * 668265263u ^
                    static_cast<std::uint32_t>(kv) * 374761393u ^
                    static_cast<std::uint32_t>(head) * 97u ^ static_cast<std::uint32_t>(d);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h & mask);
}

std::uint32_t mask_for(DType dtype) {
  return dtype == DType::f32 ? 0xffffffu : dtype == DType::f16 ? 0x7ffu : 0xffu;
}

template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <typename T>
__device__ inline float to_float(T v) {
  return static_cast<float>(v);
}

// grid: (token blocks, slots); writes tokens [begin[s], end[s]) of slot
// slots[s], every layer, K and V, through the views' strides.
template <typename T>
__global__ void write_pattern_kernel(LayerViews views, const int* slots, const int* begin,
                                     const int* end, std::uint32_t tag, std::uint32_t mask) {
  const int s = slots[blockIdx.y];
  const KvLayerView& v0 = views.layer[0];
  const int per_token = views.num_layers * 2 * v0.num_kv_heads * v0.head_dim;
  for (int t = begin[blockIdx.y] + blockIdx.x; t < end[blockIdx.y]; t += gridDim.x) {
    for (int e = threadIdx.x; e < per_token; e += blockDim.x) {
      const int d = e % v0.head_dim;
      const int head = (e / v0.head_dim) % v0.num_kv_heads;
      const int kv = (e / (v0.head_dim * v0.num_kv_heads)) % 2;
      const int layer = e / (v0.head_dim * v0.num_kv_heads * 2);
      const KvLayerView& view = views.layer[layer];
      T* base = static_cast<T*>(kv == 0 ? view.k : view.v);
      base[s * view.slot_stride + t * view.token_stride + head * view.head_stride + d] =
          from_float<T>(pattern_value(tag, s, t, layer, kv, head, d, mask));
    }
  }
}

// Reads and checks tokens [0, len[i]) of slots[i] again and again until *stop
// becomes non-zero (host-mapped memory) or 5 s pass, counting mismatches.
template <typename T>
__global__ void verify_loop_kernel(LayerViews views, const int* slots, const int* lengths,
                                   int num_slots, std::uint32_t tag, std::uint32_t mask,
                                   const volatile int* stop, unsigned long long* mismatches,
                                   unsigned long long* passes) {
  __shared__ int done;
  const KvLayerView& v0 = views.layer[0];
  const int per_token = views.num_layers * 2 * v0.num_kv_heads * v0.head_dim;
  std::uint64_t start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long bad = 0;
  for (;;) {
    for (int i = 0; i < num_slots; ++i) {
      const int s = slots[i];
      for (int t = blockIdx.x; t < lengths[i]; t += gridDim.x) {
        for (int e = threadIdx.x; e < per_token; e += blockDim.x) {
          const int d = e % v0.head_dim;
          const int head = (e / v0.head_dim) % v0.num_kv_heads;
          const int kv = (e / (v0.head_dim * v0.num_kv_heads)) % 2;
          const int layer = e / (v0.head_dim * v0.num_kv_heads * 2);
          const KvLayerView& view = views.layer[layer];
          const T* base = static_cast<const T*>(kv == 0 ? view.k : view.v);
          const float got = to_float(
              base[s * view.slot_stride + t * view.token_stride + head * view.head_stride + d]);
          bad += got != pattern_value(tag, s, t, layer, kv, head, d, mask);
        }
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint64_t now = 0;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      done = *stop != 0 || now - start > 5'000'000'000ull;
      if (blockIdx.x == 0) atomicAdd(passes, 1ull);
    }
    __syncthreads();
    if (done) break;
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

LayerViews views_of(const KvCache& cache) {
  LayerViews views;
  views.num_layers = cache.config().shape.num_layers;
  VPOD_CHECK(views.num_layers <= kMaxLayers);
  for (int l = 0; l < views.num_layers; ++l) views.layer[l] = cache.layer_view(l);
  return views;
}

cuda::DeviceBuffer upload(const std::vector<int>& values) {
  auto buffer = cuda::DeviceBuffer::allocate(std::max<std::size_t>(1, values.size()) * sizeof(int));
  VPOD_CHECK(buffer.ok());
  if (!values.empty()) buffer->copy_from_host(values.data(), values.size() * sizeof(int));
  return std::move(buffer).value();
}

// Launches write_pattern_kernel. Its argument buffers are allocated once:
// cudaFree synchronizes the device, which must not happen while a test's
// long-running kernel waits for the host.
class PatternWriter {
 public:
  static constexpr int kMaxSlots = 64;
  PatternWriter() {
    auto buffer = cuda::DeviceBuffer::allocate(3 * kMaxSlots * sizeof(int));
    VPOD_CHECK(buffer.ok());
    args_ = std::move(buffer).value();
  }

  void write(const KvCache& cache, const std::vector<int>& slots, const std::vector<int>& begin,
             const std::vector<int>& end, std::uint32_t tag, cudaStream_t stream) {
    const auto n = static_cast<int>(slots.size());
    if (n == 0) return;
    VPOD_CHECK(n <= kMaxSlots && begin.size() == slots.size() && end.size() == slots.size());
    std::vector<int> host(3 * kMaxSlots);
    std::copy(slots.begin(), slots.end(), host.begin());
    std::copy(begin.begin(), begin.end(), host.begin() + kMaxSlots);
    std::copy(end.begin(), end.end(), host.begin() + 2 * kMaxSlots);
    VPOD_CUDA_CHECK(cudaMemcpyAsync(args_.data(), host.data(), host.size() * sizeof(int),
                                    cudaMemcpyHostToDevice, stream));
    const int* d_slots = args_.as<int>();
    const int* d_begin = d_slots + kMaxSlots;
    const int* d_end = d_slots + 2 * kMaxSlots;
    const LayerViews views = views_of(cache);
    const dim3 grid(128, static_cast<unsigned>(n));
    const DType dtype = cache.config().shape.dtype;
    const std::uint32_t mask = mask_for(dtype);
    if (dtype == DType::f32) {
      write_pattern_kernel<float>
          <<<grid, 256, 0, stream>>>(views, d_slots, d_begin, d_end, tag, mask);
    } else if (dtype == DType::f16) {
      write_pattern_kernel<__half>
          <<<grid, 256, 0, stream>>>(views, d_slots, d_begin, d_end, tag, mask);
    } else {
      write_pattern_kernel<__nv_bfloat16>
          <<<grid, 256, 0, stream>>>(views, d_slots, d_begin, d_end, tag, mask);
    }
    VPOD_CUDA_CHECK_LAUNCH();
    VPOD_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` is staged; the kernel is done
  }

 private:
  cuda::DeviceBuffer args_;  // [3][kMaxSlots]: slots, begin, end
};

// Copies slot memory back region by region and checks every element of
// tokens [begin, tokens) at the address the layout definition gives against
// the pattern `pattern_slot` (default: the slot itself) wrote. Returns the
// mismatch count.
std::int64_t host_check(const KvCache& cache, int slot, std::int64_t tokens, std::uint32_t tag,
                        int pattern_slot = -1, std::int64_t begin = 0) {
  if (pattern_slot < 0) pattern_slot = slot;
  const KvCacheConfig& config = cache.config();
  const KvShape& shape = config.shape;
  const std::size_t elem = dtype_size(shape.dtype);
  const std::uint32_t mask = mask_for(shape.dtype);
  const std::int64_t head_elems = static_cast<std::int64_t>(shape.num_kv_heads) * shape.head_dim;
  std::int64_t bad = 0;
  std::vector<std::byte> host;
  auto check_region = [&](const void* region, int layer_lo, int layer_hi, int kv) {
    const std::int64_t per_token = head_elems * (layer_hi - layer_lo);
    host.resize(static_cast<std::size_t>(tokens * per_token) * elem);
    VPOD_CUDA_CHECK(cudaMemcpy(host.data(), region, host.size(), cudaMemcpyDeviceToHost));
    for (std::int64_t t = begin; t < tokens; ++t) {
      for (int layer = layer_lo; layer < layer_hi; ++layer) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            const std::size_t index = static_cast<std::size_t>(
                t * per_token + (layer - layer_lo) * head_elems + h * shape.head_dim + d);
            bad += load_as_float(host.data(), shape.dtype, index) !=
                   pattern_value(tag, pattern_slot, t, layer, kv, h, d, mask);
          }
        }
      }
    }
  };
  const std::size_t slot_offset = static_cast<std::size_t>(slot) * cache.slot_bytes();
  if (config.layout == KvLayout::all_layers) {
    const KvLayerView v0 = cache.layer_view(0);  // layer 0 = start of each token row
    check_region(static_cast<std::byte*>(v0.k) + slot_offset, 0, shape.num_layers, 0);
    check_region(static_cast<std::byte*>(v0.v) + slot_offset, 0, shape.num_layers, 1);
  } else {
    for (int layer = 0; layer < shape.num_layers; ++layer) {
      const KvLayerView v = cache.layer_view(layer);
      check_region(static_cast<std::byte*>(v.k) + slot_offset, layer, layer + 1, 0);
      check_region(static_cast<std::byte*>(v.v) + slot_offset, layer, layer + 1, 1);
    }
  }
  return bad;
}

std::shared_ptr<VmmProvider> cuda_provider() {
  auto provider = CudaVmmProvider::create(0);
  VPOD_CHECK_MSG(provider.ok(), provider.status().to_string());
  EXPECT_EQ(provider.value()->page_bytes() % (std::size_t{64} << 10), 0u);
  return std::shared_ptr<VmmProvider>(std::move(provider).value());
}

// 4 layers x 8 heads x 128 fp16: all-layers tokens are 8 KiB (256 per 2 MiB
// page), per-layer tokens 2 KiB (1024 per page). max_ctx 3000 is not a page
// multiple in either layout.
KvCacheConfig gpu_config(KvLayout layout, DType dtype, GrowthMode growth, std::size_t budget) {
  KvCacheConfig config;
  config.shape = KvShape{4, 8, 128, dtype};
  config.layout = layout;
  config.max_slots = 16;
  config.max_ctx = 3000;
  config.memory_bytes = budget;
  config.growth = growth;
  return config;
}

struct LayoutCase {
  KvLayout layout;
  DType dtype;
};

class KvCacheGpuViews : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(KvCacheGpuViews, KernelWritesThroughViewsAcrossPageBoundaries) {
  VPOD_REQUIRE_GPU();
  const LayoutCase param = GetParam();
  auto created = KvCache::create(
      gpu_config(param.layout, param.dtype, GrowthMode::background, std::size_t{1} << 30),
      cuda_provider());
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  KvCache& cache = **created;
  auto stream = cuda::Stream::create();
  ASSERT_TRUE(stream.ok());
  PatternWriter writer;
  // Lengths on both sides of page boundaries of both layouts.
  const std::vector<int> lengths = {1, 255, 256, 257, 511, 700, 1023, 1024, 1025, 2047, 2999, 3000};
  std::vector<int> slots, begin, end;
  std::vector<SlotTokens> next;
  for (const int length : lengths) {
    auto slot = cache.acquire(length);
    ASSERT_TRUE(slot.ok());
    slots.push_back(*slot);
    begin.push_back(0);
    end.push_back(length);
    next.push_back({*slot, length});
  }
  auto ticket = cache.prepare(next);  // through the mapper thread
  ASSERT_TRUE(ticket.ok());
  ASSERT_TRUE(cache.wait(*ticket).ok());
  writer.write(cache, slots, begin, end, 11, stream->get());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(host_check(cache, slots[i], lengths[i], 11), 0) << "slot " << slots[i];
  }
  // Grow everyone past more boundaries; old tokens must stay intact.
  next.clear();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    begin[i] = lengths[i];
    end[i] = std::min(3000, lengths[i] + 300);
    next.push_back({slots[i], end[i]});
  }
  auto grown = cache.prepare(next);
  ASSERT_TRUE(grown.ok());
  ASSERT_TRUE(cache.wait(*grown).ok());
  writer.write(cache, slots, begin, end, 11, stream->get());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(host_check(cache, slots[i], end[i], 11), 0) << "slot " << slots[i];
  }
  ASSERT_TRUE(cache.check_invariants().ok());
  const KvStats stats = cache.stats();
  std::printf("[ %s %s ] pages mapped %lld, map calls %lld (%.1f us/page), fragmentation %.3f\n",
              std::string(kv_layout_name(param.layout)).c_str(),
              std::string(dtype_name(param.dtype)).c_str(),
              static_cast<long long>(stats.pages_mapped), static_cast<long long>(stats.map_calls),
              1e6 * stats.map_seconds / std::max<std::int64_t>(1, stats.pages_mapped_total),
              stats.internal_fragmentation);
}

INSTANTIATE_TEST_SUITE_P(Layouts, KvCacheGpuViews,
                         ::testing::Values(LayoutCase{KvLayout::all_layers, DType::f16},
                                           LayoutCase{KvLayout::per_layer, DType::f16},
                                           LayoutCase{KvLayout::all_layers, DType::bf16},
                                           LayoutCase{KvLayout::per_layer, DType::f32}),
                         [](const ::testing::TestParamInfo<LayoutCase>& info) {
                           return std::string(info.param.layout == KvLayout::all_layers
                                                  ? "AllLayers"
                                                  : "PerLayer") +
                                  std::string(dtype_name(info.param.dtype));
                         });

// Host-mapped stop flag for verify_loop_kernel.
struct StopFlag {
  int* host = nullptr;
  StopFlag() {
    VPOD_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped));
    *host = 0;
  }
  ~StopFlag() { VPOD_CUDA_CHECK(cudaFreeHost(host)); }
  void set() { *reinterpret_cast<volatile int*>(host) = 1; }
};

struct Counters {
  cuda::DeviceBuffer buffer;  // [0] mismatches, [1] passes
  Counters() {
    auto b = cuda::DeviceBuffer::allocate(2 * sizeof(unsigned long long));
    VPOD_CHECK(b.ok());
    buffer = std::move(b).value();
    buffer.fill_bytes(0);
  }
  unsigned long long* mismatches() const { return buffer.as<unsigned long long>(); }
  unsigned long long* passes() const { return buffer.as<unsigned long long>() + 1; }
  void read(unsigned long long out[2]) const { buffer.copy_to_host(out, 2 * sizeof(out[0])); }
};

void launch_verify_loop(const KvCache& cache, const cuda::DeviceBuffer& slots,
                        const cuda::DeviceBuffer& lengths, int num_slots, std::uint32_t tag,
                        const StopFlag& stop, const Counters& counters, cudaStream_t stream) {
  VPOD_CHECK(cache.config().shape.dtype == DType::f16);
  int* device_stop = nullptr;
  VPOD_CUDA_CHECK(cudaHostGetDevicePointer(&device_stop, stop.host, 0));
  verify_loop_kernel<__half>
      <<<132, 256, 0, stream>>>(views_of(cache), slots.as<int>(), lengths.as<int>(), num_slots, tag,
                                0x7ffu, device_stop, counters.mismatches(), counters.passes());
  VPOD_CUDA_CHECK_LAUNCH();
}

TEST(KvCacheGpu, BackgroundGrowthAndReclaimWhileAKernelReadsOtherSlots) {
  VPOD_REQUIRE_GPU();
  KvCacheConfig config =
      gpu_config(KvLayout::all_layers, DType::f16, GrowthMode::background, 256 * (2u << 20));
  config.max_slots = 32;
  config.lookahead_tokens = 64;
  auto created = KvCache::create(config, cuda_provider());
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  KvCache& cache = **created;
  auto reader_stream = cuda::Stream::create();
  auto writer_stream = cuda::Stream::create();
  ASSERT_TRUE(reader_stream.ok() && writer_stream.ok());
  PatternWriter writer;

  // 6 reader slots (read by the long kernel), 6 idle slots holding pages
  // (reclaimed during the test), 10 growing slots.
  std::vector<int> readers, reader_len, idle, growers;
  for (int i = 0; i < 6; ++i) {
    const int length = 500 + 400 * i;
    const int s = *cache.acquire(length);
    ASSERT_TRUE(cache.ensure(s, length).ok());
    readers.push_back(s);
    reader_len.push_back(length);
  }
  writer.write(cache, readers, std::vector<int>(6, 0), reader_len, 21, writer_stream->get());
  for (int i = 0; i < 6; ++i) {
    const int s = *cache.acquire(2000);
    ASSERT_TRUE(cache.ensure(s, 2000).ok());
    idle.push_back(s);
  }
  writer.write(cache, idle, std::vector<int>(6, 0), std::vector<int>(6, 2000), 22,
               writer_stream->get());
  for (const int s : idle) ASSERT_TRUE(cache.release(s, writer_stream->get()).ok());
  for (int i = 0; i < 10; ++i) growers.push_back(*cache.acquire(0));
  const std::int64_t free_before = cache.stats().pages_free;

  StopFlag stop;
  Counters counters;
  cuda::DeviceBuffer d_readers = upload(readers), d_reader_len = upload(reader_len);
  launch_verify_loop(cache, d_readers, d_reader_len, 6, 21, stop, counters, reader_stream->get());

  // Decode-like growth of the growers, 16 tokens per step, writing each step.
  std::vector<int> len(growers.size(), 0);
  bool overlapped = true;
  for (int step = 0; step < 120; ++step) {
    std::vector<SlotTokens> next;
    std::vector<int> begin = len, end = len;
    for (std::size_t i = 0; i < growers.size(); ++i) {
      end[i] = std::min(3000, len[i] + 16);
      next.push_back({growers[i], end[i]});
    }
    auto ticket = cache.prepare(next);
    ASSERT_TRUE(ticket.ok());
    const Status waited = cache.wait(*ticket);
    ASSERT_TRUE(waited.ok()) << "step " << step << ": " << waited.to_string();
    writer.write(cache, growers, begin, end, 23, writer_stream->get());
    len = end;
    overlapped &= cudaStreamQuery(reader_stream->get()) == cudaErrorNotReady;
  }
  const KvStats stats = cache.stats();
  stop.set();
  ASSERT_EQ(cudaStreamSynchronize(reader_stream->get()), cudaSuccess);
  unsigned long long result[2] = {0, 0};
  counters.read(result);
  EXPECT_TRUE(overlapped) << "the reading kernel ended before growth did";
  EXPECT_EQ(result[0], 0u) << "mismatches seen by the reading kernel";
  EXPECT_GE(result[1], 1u);
  EXPECT_GT(stats.pages_reclaimed, 0) << "free before: " << free_before;
  EXPECT_GT(stats.mapper_pages, 0);
  for (std::size_t i = 0; i < growers.size(); ++i) {
    EXPECT_EQ(host_check(cache, growers[i], len[i], 23), 0) << "grower " << growers[i];
  }
  for (std::size_t i = 0; i < readers.size(); ++i) {
    EXPECT_EQ(host_check(cache, readers[i], reader_len[i], 21), 0) << "reader " << readers[i];
  }
  ASSERT_TRUE(cache.check_invariants().ok());
  std::printf(
      "[ overlap ] reader passes %llu, mapper pages %lld in %.2f ms, reclaimed %lld, "
      "wait total %.3f ms over %lld waits\n",
      result[1], static_cast<long long>(stats.mapper_pages), 1e3 * stats.mapper_busy_seconds,
      static_cast<long long>(stats.pages_reclaimed), 1e3 * stats.wait_seconds,
      static_cast<long long>(stats.wait_calls));
}

TEST(KvCacheGpu, ReleasedSlotIsNotUnmappedWhileAKernelStillReadsIt) {
  VPOD_REQUIRE_GPU();
  // 24 pages: slot a takes 24 (3000 tokens, 12 per K/V); b needs pages from a.
  KvCacheConfig config =
      gpu_config(KvLayout::all_layers, DType::f16, GrowthMode::synchronous, 24 * (2u << 20));
  auto provider = std::make_shared<FaultInjectingProvider>(cuda_provider());  // for its ledger
  auto created = KvCache::create(config, provider);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  KvCache& cache = **created;
  auto stream = cuda::Stream::create();
  ASSERT_TRUE(stream.ok());
  PatternWriter writer;
  const int a = *cache.acquire(3000);
  ASSERT_TRUE(cache.ensure(a, 3000).ok());
  EXPECT_EQ(cache.stats().pages_free, 0);
  writer.write(cache, {a}, {0}, {3000}, 31, stream->get());

  StopFlag stop;
  Counters counters;
  cuda::DeviceBuffer d_slots = upload({a}), d_len = upload({3000});
  launch_verify_loop(cache, d_slots, d_len, 1, 31, stop, counters, stream->get());
  ASSERT_TRUE(cache.release(a, stream->get()).ok());  // the kernel still reads a

  const int b = *cache.acquire(0);
  const std::int64_t unmaps_before = provider->ledger().unmap_calls;
  auto grown = std::async(std::launch::async, [&] { return cache.ensure(b, 1000); });
  EXPECT_EQ(grown.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "pages were reclaimed while a kernel still read them";
  EXPECT_EQ(provider->ledger().unmap_calls, unmaps_before);
  stop.set();
  const Status status = grown.get();
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  unsigned long long result[2] = {0, 0};
  counters.read(result);
  EXPECT_EQ(result[0], 0u);
  EXPECT_GE(result[1], 1u);
  EXPECT_GE(cache.backed_tokens(b), 1000);
  EXPECT_GT(cache.stats().pages_reclaimed, 0);
  ASSERT_TRUE(cache.check_invariants().ok());
}

// Prefix caching: a second slot whose request starts with the first one's
// indexed blocks maps the same physical pages at its own addresses; reads
// through it return what the first slot wrote, and its own writes past the
// blocks leave the first slot's K/V untouched.
TEST(KvCacheGpu, PrefixBlocksAreTheSamePhysicalPagesInTwoSlots) {
  VPOD_REQUIRE_GPU();
  KvCacheConfig config =
      gpu_config(KvLayout::all_layers, DType::f16, GrowthMode::background, std::size_t{1} << 30);
  config.prefix_caching = true;
  auto provider = std::make_shared<FaultInjectingProvider>(cuda_provider());
  auto created = KvCache::create(config, provider);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  KvCache& cache = **created;
  ASSERT_EQ(cache.prefix_block_tokens(), 256);  // 2 MiB / 8 KiB tokens
  auto stream = cuda::Stream::create();
  ASSERT_TRUE(stream.ok());
  PatternWriter writer;
  std::vector<std::int32_t> prompt(700);
  for (int i = 0; i < 700; ++i) prompt[i] = 1000 + i;

  const Allocation a = cache.allocate(700, {prompt, 0});
  EXPECT_EQ(a.cached_tokens, 0);
  HybridBatch batch;
  batch.prefills.push_back({.slot = a.slot, .cached_len = 0, .num_new = 700});
  cache.cache_prompt(a.slot, prompt, 700);
  ASSERT_TRUE(cache.prepare(batch).ok());
  writer.write(cache, {a.slot}, {0}, {700}, 21, stream->get());
  EXPECT_EQ(cache.stats().prefix_blocks_cached, 2);

  const Allocation b = cache.allocate(700, {prompt, 0});
  EXPECT_EQ(b.cached_tokens, 512);
  ASSERT_NE(b.slot, a.slot);
  batch.prefills = {{.slot = b.slot, .cached_len = 512, .num_new = 188}};
  cache.cache_prompt(b.slot, prompt, 700);
  ASSERT_TRUE(cache.prepare(batch).ok());
  writer.write(cache, {b.slot}, {512}, {700}, 22, stream->get());
  EXPECT_EQ(host_check(cache, b.slot, 512, 21, a.slot), 0) << "B's blocks are not A's K/V";
  EXPECT_EQ(host_check(cache, b.slot, 700, 22, b.slot, 512), 0);
  EXPECT_EQ(host_check(cache, a.slot, 700, 21), 0) << "B's writes reached A";
  EXPECT_GT(provider->ledger().shared_maps, 0);
  EXPECT_EQ(provider->ledger().double_maps, 0);
  cache.free(a.slot);
  cache.free(b.slot);
  cache.drain();
  ASSERT_TRUE(cache.check_invariants().ok()) << cache.check_invariants().to_string();
  EXPECT_EQ(provider->ledger().released_while_mapped, 0);
}

TEST(KvCacheGpu, ProbeReadsMappedRanges) {
  VPOD_REQUIRE_GPU();
  auto created = KvCache::create(
      gpu_config(KvLayout::all_layers, DType::f16, GrowthMode::synchronous, 64 * (2u << 20)),
      cuda_provider());
  ASSERT_TRUE(created.ok());
  KvCache& cache = **created;
  const int s = *cache.acquire(1000);
  ASSERT_TRUE(cache.ensure(s, 1000).ok());
  auto stream = cuda::Stream::create();
  PatternWriter writer;
  writer.write(cache, {s}, {0}, {1000}, 41, stream->get());
  const KvLayerView v = cache.layer_view(0);
  const std::size_t offset = static_cast<std::size_t>(s) * cache.slot_bytes();
  const KvRange ranges[2] = {
      {static_cast<std::byte*>(v.k) + offset, 1000 * cache.region_token_bytes()},
      {static_cast<std::byte*>(v.v) + offset, 1000 * cache.region_token_bytes()}};
  auto d_ranges = cuda::DeviceBuffer::allocate(sizeof(ranges));
  auto d_sum = cuda::DeviceBuffer::allocate(sizeof(std::uint64_t));
  ASSERT_TRUE(d_ranges.ok() && d_sum.ok());
  d_ranges->copy_from_host(ranges, sizeof(ranges));
  d_sum->fill_bytes(0);
  ASSERT_TRUE(
      launch_kv_read(d_ranges->as<KvRange>(), 2, d_sum->as<std::uint64_t>(), stream->get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  std::uint64_t sum = 0;
  d_sum->copy_to_host(&sum, sizeof(sum));
  EXPECT_NE(sum, 0u);  // the pattern is not all zeros
}

}  // namespace
}  // namespace vpod::kvcache
