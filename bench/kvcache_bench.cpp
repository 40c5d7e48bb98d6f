// `vpod bench kvcache`: the vAttention KV cache at Llama-3-8B shapes (32
// layers, 8 KV heads, head_dim 128, fp16) on the GPU's VMM (or the host
// provider with --device cpu).
//
// It first validates: pages mapped through the cache hold what is written
// through its views, and the GPU read probe sees exactly those bytes. Then:
//   1. per-page latency of the provider's calls (create, map + set access,
//      unmap, remap of a pooled page, release): median and p99;
//   2. the footprint of a 1-token request and the internal fragmentation of
//      each layout (and of the paged baseline) over random request lengths;
//   3. decode steps at batch 16 / 64 / 256 with contexts up to 32K: each step
//      launches a kernel that reads every backed K/V byte of the batch (the
//      memory traffic of decode attention), then grows every sequence by one
//      token, either synchronously (ensure() on the step thread after the
//      step) or in the background (prepare() right after launch, wait() before
//      the next step). The critical path is the time the step thread spends
//      in those calls. Also: the mapper's page rate against the rate the batch
//      needs (tokens/s x bytes per token / page size);
//   4. the paged baseline's per-step block bookkeeping on the same workload.
// Table on stdout, everything with --json FILE.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/benches.h"
#include "common/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/stream.h"
#include "kvcache/cuda_vmm.h"
#include "kvcache/host_vmm.h"
#include "kvcache/kv_cache.h"
#include "kvcache/kv_probe.h"
#include "kvcache/paged_kv_cache.h"

namespace vpod::bench {
namespace {

using kvcache::KvCache;
using kvcache::KvCacheConfig;
using kvcache::KvLayout;
using kvcache::KvShape;
using kvcache::KvStats;
using kvcache::PagedKvCache;
using kvcache::PagedKvCacheConfig;
using kvcache::SlotTokens;
using kvcache::VmmProvider;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr KvShape kLlama3_8b{32, 8, 128, DType::f16};
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr double kMiB = 1024.0 * 1024.0;

struct Args {
  std::string device = "auto";
  std::string memory;  // default: 96 GiB (capped by free memory) on CUDA, 1 GiB on the CPU
  std::vector<int> batches = {16, 64, 256};
  int max_context = 32768;
  int steps = 96;
  std::int64_t lookahead = 0;
  int latency_pages = 256;
  double cpu_step_ms = 2.0;  // stand-in for the GPU step when running on the host
  std::string json_path;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Summary {
  double median = 0, p99 = 0, mean = 0;
};

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.median = values[values.size() / 2];
  s.p99 = values[std::min(values.size() - 1, values.size() * 99 / 100)];
  double total = 0;
  for (const double v : values) total += v;
  s.mean = total / static_cast<double>(values.size());
  return s;
}

json to_json(const Summary& s) { return {{"median", s.median}, {"p99", s.p99}, {"mean", s.mean}}; }

[[noreturn]] void fail(const std::string& what) {
  fmt::print(stderr, "vpod bench kvcache: {}\n", what);
  throw CLI::RuntimeError(1);
}

template <typename T>
T check(Result<T> result, const char* what) {
  if (!result.ok()) fail(fmt::format("{}: {}", what, result.status().to_string()));
  return std::move(result).value();
}

void check(const Status& status, const char* what) {
  if (!status.ok()) fail(fmt::format("{}: {}", what, status.to_string()));
}

// Where the step's "kernels" run: a real read of the batch's KV on the GPU, a
// sleep of cpu_step_ms on the host.
class StepDevice {
 public:
  explicit StepDevice(Device device, double cpu_step_ms)
      : device_(device), cpu_step_ms_(cpu_step_ms) {
    if (device_ != Device::cuda) return;
    stream_ = check(cuda::Stream::create(), "creating a stream");
    constexpr std::size_t kMaxRanges = 256 * 64;  // batch 256, per-layer
    ranges_ = check(cuda::DeviceBuffer::allocate(kMaxRanges * sizeof(kvcache::KvRange)), "ranges");
    checksum_ = check(cuda::DeviceBuffer::allocate(sizeof(std::uint64_t)), "checksum");
    checksum_.fill_bytes(0);
    host_ranges_.reserve(kMaxRanges);
  }

  cudaStream_t stream() const { return stream_.get(); }

  // Launches one step's reads of tokens [0, lengths[i]) of every slot.
  void launch(const KvCache& cache, const std::vector<int>& slots,
              const std::vector<std::int64_t>& lengths) {
    if (device_ != Device::cuda) {
      launched_ = Clock::now();
      return;
    }
    host_ranges_.clear();
    const int regions = cache.num_regions();
    const auto* base = static_cast<const std::byte*>(cache.layer_view(0).k);
    // Regions are laid out one after another, [max_slots, slot_bytes] each;
    // layer_view(0).k is the start of region 0 in both layouts.
    const std::size_t region_bytes =
        static_cast<std::size_t>(cache.max_slots()) * cache.slot_bytes();
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const std::size_t bytes = static_cast<std::size_t>(lengths[i]) * cache.region_token_bytes();
      for (int r = 0; r < regions; ++r) {
        host_ranges_.push_back(
            {base + r * region_bytes + static_cast<std::size_t>(slots[i]) * cache.slot_bytes(),
             bytes / 16 * 16});
      }
    }
    VPOD_CUDA_CHECK(cudaMemcpyAsync(ranges_.data(), host_ranges_.data(),
                                    host_ranges_.size() * sizeof(kvcache::KvRange),
                                    cudaMemcpyHostToDevice, stream_.get()));
    check(kvcache::launch_kv_read(ranges_.as<kvcache::KvRange>(),
                                  static_cast<int>(host_ranges_.size()),
                                  checksum_.as<std::uint64_t>(), stream_.get()),
          "launching the KV read probe");
  }

  // Waits for the step's kernels (the engine reading back sampled tokens).
  void finish() {
    if (device_ == Device::cuda) {
      VPOD_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    } else {
      std::this_thread::sleep_until(launched_ +
                                    std::chrono::duration<double, std::milli>(cpu_step_ms_));
    }
  }

 private:
  Device device_;
  double cpu_step_ms_;
  cuda::Stream stream_;
  cuda::DeviceBuffer ranges_;
  cuda::DeviceBuffer checksum_;
  std::vector<kvcache::KvRange> host_ranges_;
  Clock::time_point launched_;
};

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------
void validate(const std::shared_ptr<VmmProvider>& provider, Device device) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    KvCacheConfig config;
    config.shape = kLlama3_8b;
    config.layout = layout;
    config.max_slots = 4;
    config.max_ctx = 4096;
    // 2 slots of 1100 tokens: 35 pages per region (all-layers), 2 pages in
    // each of 64 regions (per-layer); both cross page boundaries.
    config.memory_bytes = 260 * provider->page_bytes();
    auto cache = check(KvCache::create(config, provider), "validation cache");
    const int tokens = 1100;
    std::vector<int> slots;
    for (int i = 0; i < 2; ++i) {
      const int s = check(cache->acquire(tokens), "acquire");
      check(cache->ensure(s, tokens), "ensure");
      slots.push_back(s);
    }
    const std::size_t bytes = tokens * cache->region_token_bytes();
    auto* base = static_cast<std::byte*>(cache->layer_view(0).k);
    const std::size_t region_bytes = config.max_slots * cache->slot_bytes();
    std::vector<std::uint32_t> pattern(bytes / 4), back(bytes / 4);
    std::uint32_t expected_sum = 0;  // what the probe must see, mod 2^32
    std::vector<kvcache::KvRange> ranges;
    for (const int s : slots) {
      for (int r = 0; r < cache->num_regions(); ++r) {
        std::byte* region = base + r * region_bytes + s * cache->slot_bytes();
        for (std::size_t i = 0; i < pattern.size(); ++i) {
          pattern[i] = static_cast<std::uint32_t>(i * 2654435761u + s * 97u + r * 7919u);
        }
        for (std::size_t i = 0; i < pattern.size(); i += 4) {
          expected_sum += pattern[i] ^ pattern[i + 1] ^ pattern[i + 2] ^ pattern[i + 3];
        }
        if (device == Device::cuda) {
          VPOD_CUDA_CHECK(cudaMemcpy(region, pattern.data(), bytes, cudaMemcpyHostToDevice));
          VPOD_CUDA_CHECK(cudaMemcpy(back.data(), region, bytes, cudaMemcpyDeviceToHost));
        } else {
          std::memcpy(region, pattern.data(), bytes);
          std::memcpy(back.data(), region, bytes);
        }
        if (back != pattern) fail("validation: slot memory does not hold what was written");
        ranges.push_back({region, bytes});
      }
    }
    if (device == Device::cuda) {
      auto d_ranges = check(cuda::DeviceBuffer::allocate(ranges.size() * sizeof(ranges[0])), "a");
      auto d_sum = check(cuda::DeviceBuffer::allocate(sizeof(std::uint64_t)), "b");
      d_ranges.copy_from_host(ranges.data(), ranges.size() * sizeof(ranges[0]));
      d_sum.fill_bytes(0);
      check(
          kvcache::launch_kv_read(d_ranges.as<kvcache::KvRange>(), static_cast<int>(ranges.size()),
                                  d_sum.as<std::uint64_t>(), nullptr),
          "probe");
      VPOD_CUDA_CHECK(cudaDeviceSynchronize());
      std::uint64_t sum = 0;
      d_sum.copy_to_host(&sum, sizeof(sum));
      if (static_cast<std::uint32_t>(sum) != expected_sum) {
        fail(fmt::format("validation: the read probe saw checksum {:#x}, expected {:#x}",
                         static_cast<std::uint32_t>(sum), expected_sum));
      }
    }
    check(cache->check_invariants(), "validation invariants");
  }
}

// ---------------------------------------------------------------------------
// 1. Per-page latency
// ---------------------------------------------------------------------------
json page_latency(VmmProvider& provider, int num_pages) {
  const std::size_t page = provider.page_bytes();
  std::vector<double> create_us, map_us, unmap_us, remap_us, release_us;
  std::vector<kvcache::PageHandle> pages;
  for (int i = 0; i < num_pages; ++i) {
    const auto start = Clock::now();
    pages.push_back(check(provider.create_page(), "create_page"));
    create_us.push_back(1e6 * seconds_since(start));
  }
  auto range = check(kvcache::VirtualRange::reserve(provider, num_pages * page), "reserve");
  for (int round = 0; round < 2; ++round) {
    // Round 0 maps fresh pages, round 1 remaps them (the pooled hot path),
    // in reverse order so every page lands at a new address.
    for (int i = 0; i < num_pages; ++i) {
      const kvcache::PageHandle handle = pages[round == 0 ? i : num_pages - 1 - i];
      const auto start = Clock::now();
      check(provider.map(range.base() + i * page, {&handle, 1}), "map");
      (round == 0 ? map_us : remap_us).push_back(1e6 * seconds_since(start));
    }
    for (int i = 0; i < num_pages; ++i) {
      const auto start = Clock::now();
      check(provider.unmap(range.base() + i * page, 1), "unmap");
      unmap_us.push_back(1e6 * seconds_since(start));
    }
  }
  for (const kvcache::PageHandle handle : pages) {
    const auto start = Clock::now();
    provider.release_page(handle);
    release_us.push_back(1e6 * seconds_since(start));
  }
  json out = json::object();
  out["pages"] = num_pages;
  out["create_us"] = to_json(summarize(create_us));
  out["map_us"] = to_json(summarize(map_us));
  out["unmap_us"] = to_json(summarize(unmap_us));
  out["remap_us"] = to_json(summarize(remap_us));
  out["release_us"] = to_json(summarize(release_us));
  return out;
}

// ---------------------------------------------------------------------------
// 2. Footprint and fragmentation
// ---------------------------------------------------------------------------
json footprint(const std::shared_ptr<VmmProvider>& provider) {
  json out = json::array();
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    KvCacheConfig config;
    config.shape = kLlama3_8b;
    config.layout = layout;
    config.max_slots = 1;
    config.max_ctx = 32768;
    config.memory_bytes = 2 * 32 * provider->page_bytes();
    config.growth = kvcache::GrowthMode::synchronous;
    auto cache = check(KvCache::create(config, provider), "footprint cache");
    const int s = check(cache->acquire(1), "acquire");
    check(cache->ensure(s, 1), "ensure 1 token");
    const KvStats stats = cache->stats();
    const auto pages = static_cast<std::int64_t>(cache->slot_pages(s).size());
    out.push_back({{"layout", kv_layout_name(layout)},
                   {"pages_per_k", pages / 2},
                   {"pages_per_v", pages / 2},
                   {"bytes_backed", stats.bytes_backed},
                   {"tokens_backed", cache->backed_tokens(s)},
                   {"bytes_used", stats.bytes_used}});
  }
  return out;
}

// Waste per request over random lengths, from each store's exact geometry.
json fragmentation(const std::shared_ptr<VmmProvider>& provider) {
  json out = json::array();
  const std::size_t token_bytes = kLlama3_8b.bytes_per_token();
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    KvCacheConfig config;
    config.shape = kLlama3_8b;
    config.layout = layout;
    config.max_slots = 1;
    config.max_ctx = 32768;
    config.memory_bytes = 64 * provider->page_bytes();
    config.growth = kvcache::GrowthMode::synchronous;
    caches.push_back(check(KvCache::create(config, provider), "geometry cache"));
  }
  for (const int max_len : {2048, 32768}) {
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int> length(1, max_len);
    std::vector<int> lengths(20000);
    for (int& l : lengths) l = length(rng);
    auto report = [&](const std::string& store, auto backed_bytes) {
      double waste = 0, backed = 0;
      for (const int l : lengths) {
        const double b = static_cast<double>(backed_bytes(l));
        backed += b;
        waste += b - static_cast<double>(l) * token_bytes;
      }
      out.push_back({{"store", store},
                     {"max_len", max_len},
                     {"mean_waste_mib", waste / lengths.size() / kMiB},
                     {"waste_fraction", waste / backed}});
    };
    for (const auto& cache : caches) {
      report(std::string("vattn ") + std::string(kv_layout_name(cache->config().layout)),
             [&](int l) {
               return static_cast<std::size_t>(cache->pages_for_tokens(l)) * cache->num_regions() *
                      cache->page_bytes();
             });
    }
    for (const int block : {16, 256}) {
      report(fmt::format("paged block {}", block), [&](int l) {
        return static_cast<std::size_t>((l + block - 1) / block * block) * token_bytes;
      });
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// 3. Decode steps
// ---------------------------------------------------------------------------
struct Workload {
  int batch = 0;
  int ctx_lo = 0;
  int ctx_hi = 0;
  std::vector<std::int64_t> start;  // per sequence
};

// Contexts up to max_context, halved until batch x (context + growth) fits
// in 90% of the pool for this layout; nothing if not even 16 tokens fit.
std::optional<Workload> make_workload(const KvCache& cache, int batch, const Args& args) {
  const std::int64_t pool = cache.stats().pages_total;
  const std::int64_t growth = 2 * args.steps + args.lookahead + 1;
  const auto fits = [&](int hi) {
    const std::int64_t tokens = std::min<std::int64_t>(cache.max_ctx(), hi + growth);
    return batch * cache.pages_for_tokens(tokens) * cache.num_regions() <= pool * 9 / 10;
  };
  int hi = std::min(args.max_context, cache.max_ctx());
  while (hi >= 16 && !fits(hi)) hi /= 2;
  if (hi < 16) return std::nullopt;
  Workload w;
  w.batch = batch;
  w.ctx_hi = hi;
  w.ctx_lo = hi / 2;
  std::mt19937 rng(42 + batch);
  std::uniform_int_distribution<int> dist(w.ctx_lo, w.ctx_hi);
  for (int i = 0; i < batch; ++i) w.start.push_back(dist(rng));
  return w;
}

json decode_run(KvCache& cache, StepDevice& device, const Workload& w, const Args& args) {
  std::vector<int> slots;
  std::vector<std::int64_t> lengths = w.start;
  for (int i = 0; i < w.batch; ++i) {
    const int s = check(cache.acquire(w.start[i]), "acquire");
    check(cache.ensure(s, w.start[i]), "setup ensure");
    slots.push_back(s);
  }
  std::vector<SlotTokens> next(w.batch);
  const double pages_per_token =
      static_cast<double>(cache.config().shape.bytes_per_token()) / cache.page_bytes();
  json modes = json::array();
  for (const bool background : {false, true}) {
    const KvStats before = cache.stats();
    std::vector<double> critical_us, step_ms;
    for (int step = 0; step < args.steps; ++step) {
      const auto step_start = Clock::now();
      device.launch(cache, slots, lengths);
      for (int i = 0; i < w.batch; ++i) next[i] = {slots[i], lengths[i] + 1};
      double critical = 0;
      if (background) {
        const auto t0 = Clock::now();
        const auto ticket = check(cache.prepare(next), "prepare");
        critical += seconds_since(t0);
        device.finish();
        const auto t1 = Clock::now();
        check(cache.wait(ticket), "wait");
        critical += seconds_since(t1);
      } else {
        device.finish();
        const auto t0 = Clock::now();
        for (const SlotTokens& entry : next)
          check(cache.ensure(entry.slot, entry.tokens), "ensure");
        critical += seconds_since(t0);
      }
      for (int i = 0; i < w.batch; ++i) ++lengths[i];
      critical_us.push_back(1e6 * critical);
      step_ms.push_back(1e3 * seconds_since(step_start));
    }
    cache.drain();
    const KvStats after = cache.stats();
    const Summary critical = summarize(critical_us);
    const Summary step = summarize(step_ms);
    const std::int64_t pages = after.pages_mapped_total - before.pages_mapped_total;
    const std::int64_t mapper_pages = after.mapper_pages - before.mapper_pages;
    const double mapper_busy = after.mapper_busy_seconds - before.mapper_busy_seconds;
    const double needed = w.batch / (step.mean / 1e3) * pages_per_token;
    modes.push_back({{"mode", background ? "background" : "synchronous"},
                     {"critical_us", to_json(critical)},
                     {"step_ms", to_json(step)},
                     {"pages_mapped", pages},
                     {"pages_per_step", static_cast<double>(pages) / args.steps},
                     {"map_us_per_page",
                      pages > 0 ? 1e6 * (after.map_seconds - before.map_seconds) / pages : 0.0},
                     {"mapper_pages", mapper_pages},
                     {"mapper_pages_per_s", mapper_busy > 0 ? mapper_pages / mapper_busy : 0.0},
                     {"needed_pages_per_s", needed}});
  }
  for (const int s : slots) check(cache.release(s, device.stream()), "release");
  cache.drain();
  check(cache.reclaim_idle(cache.stats().pages_total).status(), "trim");
  return {{"layout", kv_layout_name(cache.config().layout)},
          {"batch", w.batch},
          {"ctx_lo", w.ctx_lo},
          {"ctx_hi", w.ctx_hi},
          {"steps", args.steps},
          {"lookahead", args.lookahead},
          {"modes", modes}};
}

json paged_run(Device device, const Workload& w, int block, const Args& args) {
  PagedKvCacheConfig config;
  config.shape = kLlama3_8b;
  config.block_size = block;
  config.max_slots = w.batch;
  config.max_ctx = w.ctx_hi + 2 * args.steps + block;
  config.memory_bytes = static_cast<std::size_t>(w.batch) *
                        ((config.max_ctx + block - 1) / block * block) *
                        kLlama3_8b.bytes_per_token();
  config.device = device;
  auto cache = check(PagedKvCache::create(config), "paged cache");
  cuda::Stream stream;
  if (device == Device::cuda) stream = check(cuda::Stream::create(), "stream");
  std::vector<int> slots;
  std::vector<std::int64_t> lengths = w.start;
  for (int i = 0; i < w.batch; ++i) {
    slots.push_back(check(cache->acquire(w.start[i]), "acquire"));
    check(cache->ensure(slots.back(), w.start[i]), "ensure");
  }
  std::vector<SlotTokens> next(w.batch);
  std::vector<double> critical_us;
  for (int step = 0; step < 2 * args.steps; ++step) {
    for (int i = 0; i < w.batch; ++i) next[i] = {slots[i], lengths[i] + 1};
    const auto t0 = Clock::now();
    check(cache->wait(check(cache->prepare(next), "prepare")), "wait");
    check(cache->sync_block_tables(stream.get()), "block tables");
    critical_us.push_back(1e6 * seconds_since(t0));
    for (std::int64_t& l : lengths) ++l;
  }
  if (device == Device::cuda) stream.synchronize();
  return {{"store", fmt::format("paged block {}", block)},
          {"batch", w.batch},
          {"critical_us", to_json(summarize(critical_us))},
          {"fragmentation", cache->stats().internal_fragmentation}};
}

// ---------------------------------------------------------------------------
// Driver
// ---------------------------------------------------------------------------
std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

void print_report(const json& r) {
  fmt::print("\nvpod bench kvcache  {}  {}  ({} provider, {:.0f} KiB pages, pool {:.1f} GiB)\n",
             r["date"].get<std::string>(), r["device_name"].get<std::string>(),
             r["provider"].get<std::string>(), r["page_bytes"].get<double>() / 1024,
             r["pool_bytes"].get<double>() / kGiB);
  const json& lat = r["page_latency"];
  fmt::print("\nPer-page VMM latency ({} pages)\n", lat["pages"].get<int>());
  fmt::print("  {:<28} {:>10} {:>10}\n", "operation", "median us", "p99 us");
  for (const auto& [key, name] :
       std::vector<std::pair<std::string, std::string>>{{"create_us", "create (pool build)"},
                                                        {"map_us", "map + set access"},
                                                        {"remap_us", "remap pooled page"},
                                                        {"unmap_us", "unmap"},
                                                        {"release_us", "release (teardown)"}}) {
    fmt::print("  {:<28} {:>10.1f} {:>10.1f}\n", name, lat[key]["median"].get<double>(),
               lat[key]["p99"].get<double>());
  }
  fmt::print("\n1-token request (Llama-3-8B)\n");
  fmt::print("  {:<12} {:>11} {:>11} {:>12} {:>14}\n", "layout", "pages per K", "pages per V",
             "MiB backed", "tokens backed");
  for (const json& f : r["footprint"]) {
    fmt::print("  {:<12} {:>11} {:>11} {:>12.0f} {:>14}\n", f["layout"].get<std::string>(),
               f["pages_per_k"].get<int>(), f["pages_per_v"].get<int>(),
               f["bytes_backed"].get<double>() / kMiB, f["tokens_backed"].get<int>());
  }
  fmt::print("\nInternal fragmentation, lengths uniform in [1, N] (20000 requests)\n");
  fmt::print("  {:<20} {:>6} {:>18} {:>8}\n", "store", "N", "waste MiB/request", "waste");
  for (const json& f : r["fragmentation"]) {
    fmt::print("  {:<20} {:>6} {:>18.2f} {:>7.1f}%\n", f["store"].get<std::string>(),
               f["max_len"].get<int>(), f["mean_waste_mib"].get<double>(),
               100 * f["waste_fraction"].get<double>());
  }
  fmt::print("\nDecode steps: critical-path time of growth per step (us), lookahead {} tokens\n",
             r["lookahead"].get<int>());
  fmt::print("  {:<10} {:>5} {:>12} {:<11} {:>8} {:>8} {:>8} {:>8} {:>9} {:>11} {:>11}\n", "layout",
             "batch", "context", "mode", "median", "p99", "mean", "step ms", "pages/st",
             "mapper p/s", "needed p/s");
  for (const json& run : r["decode"]) {
    for (const json& m : run["modes"]) {
      fmt::print(
          "  {:<10} {:>5} {:>12} {:<11} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.2f} {:>9.2f} {:>11.0f} "
          "{:>11.0f}\n",
          run["layout"].get<std::string>(), run["batch"].get<int>(),
          fmt::format("{}-{}", run["ctx_lo"].get<int>(), run["ctx_hi"].get<int>()),
          m["mode"].get<std::string>(), m["critical_us"]["median"].get<double>(),
          m["critical_us"]["p99"].get<double>(), m["critical_us"]["mean"].get<double>(),
          m["step_ms"]["mean"].get<double>(), m["pages_per_step"].get<double>(),
          m["mapper_pages_per_s"].get<double>(), m["needed_pages_per_s"].get<double>());
    }
  }
  fmt::print("\nPaged baseline: block bookkeeping + block-table upload per step (us)\n");
  fmt::print("  {:<16} {:>5} {:>8} {:>8} {:>8}\n", "store", "batch", "median", "p99", "mean");
  for (const json& p : r["paged"]) {
    fmt::print("  {:<16} {:>5} {:>8.1f} {:>8.1f} {:>8.1f}\n", p["store"].get<std::string>(),
               p["batch"].get<int>(), p["critical_us"]["median"].get<double>(),
               p["critical_us"]["p99"].get<double>(), p["critical_us"]["mean"].get<double>());
  }
}

void run_bench(const Args& args) {
  const auto backend = check(cuda::choose_backend(args.device), "choosing the device");
  const Device device = backend.device;
  std::shared_ptr<VmmProvider> provider;
  std::string device_name = "host CPU";
  std::size_t budget = kGiB;
  if (device == Device::cuda) {
    provider = check(kvcache::CudaVmmProvider::create(0), "CUDA VMM provider");
    const auto gpus = check(cuda::query_gpus(), "querying GPUs");
    device_name = gpus.at(0).name;
    budget = std::min<std::size_t>(96 * kGiB, gpus.at(0).free_memory_bytes * 85 / 100);
  } else {
    provider = check(kvcache::HostVmmProvider::create(), "host VMM provider");
  }
  if (!args.memory.empty())
    budget = check(kvcache::parse_memory_size(args.memory), "--kv-cache-memory");
  fmt::print("validating on {} ...\n", device_name);
  validate(provider, device);

  json report;
  report["date"] = utc_now();
  report["device_name"] = device_name;
  report["provider"] = std::string(provider->name());
  report["page_bytes"] = provider->page_bytes();
  report["pool_bytes"] = budget;
  report["lookahead"] = args.lookahead;
  report["shape"] = {{"layers", kLlama3_8b.num_layers},
                     {"kv_heads", kLlama3_8b.num_kv_heads},
                     {"head_dim", kLlama3_8b.head_dim},
                     {"dtype", "fp16"}};
  fmt::print("per-page latency ...\n");
  report["page_latency"] = page_latency(*provider, args.latency_pages);
  report["footprint"] = footprint(provider);
  report["fragmentation"] = fragmentation(provider);

  StepDevice step_device(device, args.cpu_step_ms);
  report["decode"] = json::array();
  std::vector<Workload> workloads;
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    KvCacheConfig config;
    config.shape = kLlama3_8b;
    config.layout = layout;
    config.max_slots = *std::max_element(args.batches.begin(), args.batches.end());
    config.max_ctx = args.max_context + 4 * args.steps + static_cast<int>(args.lookahead) + 64;
    config.memory_bytes = budget;
    config.lookahead_tokens = args.lookahead;
    const auto start = Clock::now();
    auto cache = check(KvCache::create(config, provider), "decode cache");
    fmt::print("{}: pool of {} pages built in {:.2f} s\n", kv_layout_name(layout),
               cache->stats().pages_total, seconds_since(start));
    report["pool_build_seconds"][std::string(kv_layout_name(layout))] = seconds_since(start);
    for (const int batch : args.batches) {
      const std::optional<Workload> w = make_workload(*cache, batch, args);
      if (!w) {
        fmt::print("  decode batch {}: skipped, the pool cannot hold it\n", batch);
        continue;
      }
      if (layout == KvLayout::all_layers) workloads.push_back(*w);
      fmt::print("  decode batch {} contexts {}-{} ...\n", batch, w->ctx_lo, w->ctx_hi);
      report["decode"].push_back(decode_run(*cache, step_device, *w, args));
    }
  }
  report["paged"] = json::array();
  for (const Workload& w : workloads) {
    for (const int block : {16, 256}) report["paged"].push_back(paged_run(device, w, block, args));
  }
  print_report(report);
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path);
    out << report.dump(2) << "\n";
    if (!out) fail("cannot write " + args.json_path);
    fmt::print("\nwrote {}\n", args.json_path);
  }
}

}  // namespace

void add_kvcache_bench(CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand(
      "kvcache", "vAttention KV cache: VMM latency, fragmentation, decode critical path");
  cmd->add_option("--device", args->device, "auto|cuda|cpu")->capture_default_str();
  cmd->add_option("--kv-cache-memory", args->memory,
                  "physical KV budget, e.g. 64GiB (default 96GiB capped at 85% of free GPU "
                  "memory; 1GiB on the CPU)");
  cmd->add_option("--batches", args->batches, "decode batch sizes")->capture_default_str();
  cmd->add_option("--max-context", args->max_context, "longest starting context")
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "decode steps per mode")->capture_default_str();
  cmd->add_option("--lookahead", args->lookahead, "tokens mapped ahead by the mapper")
      ->capture_default_str();
  cmd->add_option("--latency-pages", args->latency_pages, "pages in the latency test")
      ->capture_default_str();
  cmd->add_option("--cpu-step-ms", args->cpu_step_ms, "simulated step time on the CPU")
      ->capture_default_str();
  cmd->add_option("--json", args->json_path, "write the results as JSON");
  cmd->callback([args] { run_bench(*args); });
}

}  // namespace vpod::bench
