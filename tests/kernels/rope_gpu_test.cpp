// RoPE fused with KV append against rope_ref + kv_append_ref, per-layer and
// all-layers (strided) cache layouts, padding tokens skipped.
#include <gtest/gtest.h>

#include "kernels/rope/rope.h"
#include "model_ops_gpu_support.h"
#include "support/gpu.h"

namespace vpod::kernels {
namespace {

using namespace testing;

TEST(RopeKvAppendGpu, MatchesUnfusedReference) {
  VPOD_REQUIRE_GPU();
  const int tokens = 23, q_heads = 8, kv_heads = 2, d = 128, slots = 3, max_ctx = 64;
  const int row = (q_heads + 2 * kv_heads) * d;  // fused qkv row
  const int layers = 2;                          // all-layers layout viewed at layer 1
  RopeParams rp;
  rp.theta = 500000.0;
  rp.scaling = RopeScalingType::llama3;
  rp.factor = 8.0;
  const auto inv = rope_inv_freq(rp, d);
  std::vector<std::int32_t> positions(tokens), slot_of(tokens), index(tokens);
  for (int t = 0; t < tokens; ++t) {
    slot_of[t] = t == 5 ? -1 : t % slots;  // token 5 is padding
    index[t] = t / slots + 3;
    positions[t] = 1000 * t + 7;  // large positions exercise the scaled frequencies
  }
  for (DType dt : kAllDtypes) {
    const auto qkv = round_to(random_vector(tokens * row, 9, -2, 2), dt);
    // Reference: rotate q and k in fp32, append into a float cache.
    std::vector<float> want = qkv;
    rope_ref(want.data(), row, tokens, q_heads, d, positions.data(), inv.data());
    rope_ref(want.data() + q_heads * d, row, tokens, kv_heads, d, positions.data(), inv.data());
    const std::int64_t token_stride = static_cast<std::int64_t>(layers) * kv_heads * d;
    const std::int64_t slot_stride = token_stride * max_ctx;
    const std::size_t cache_elems = static_cast<std::size_t>(slot_stride) * slots;
    std::vector<float> want_k(cache_elems, 0.0f), want_v(cache_elems, 0.0f);
    KvLayerView host_kv;
    host_kv.k = want_k.data() + kv_heads * d;  // layer 1
    host_kv.v = want_v.data() + kv_heads * d;
    host_kv.dtype = DType::f32;
    host_kv.device = Device::cpu;
    host_kv.num_slots = slots;
    host_kv.max_ctx = max_ctx;
    host_kv.num_kv_heads = kv_heads;
    host_kv.head_dim = d;
    host_kv.slot_stride = slot_stride;
    host_kv.token_stride = token_stride;
    host_kv.head_stride = d;
    kv_append_ref(want.data() + q_heads * d, row, want.data() + (q_heads + kv_heads) * d, row,
                  tokens, slot_of.data(), index.data(), host_kv);

    auto dqkv = to_device(qkv, dt);
    auto dk = to_device(std::vector<float>(cache_elems, 0.0f), dt);
    auto dv = to_device(std::vector<float>(cache_elems, 0.0f), dt);
    cuda::DeviceBuffer ints =
        cuda::DeviceBuffer::allocate(3 * tokens * sizeof(std::int32_t)).value();
    ints.copy_from_host(positions.data(), tokens * 4, 0);
    ints.copy_from_host(slot_of.data(), tokens * 4, tokens * 4);
    ints.copy_from_host(index.data(), tokens * 4, 2 * tokens * 4);
    auto dinv = to_device(inv, DType::f32);
    RopeKvAppendArgs a;
    auto* base = static_cast<std::uint8_t*>(dqkv.data());
    const std::size_t es = dtype_size(dt);
    a.q = TensorView(base, dt, {tokens, q_heads, d}, {row, d, 1}, Device::cuda);
    a.k = TensorView(base + q_heads * d * es, dt, {tokens, kv_heads, d}, {row, d, 1}, Device::cuda);
    a.v = TensorView(base + (q_heads + kv_heads) * d * es, dt, {tokens, kv_heads, d}, {row, d, 1},
                     Device::cuda);
    a.positions = ints.as<std::int32_t>();
    a.slots = ints.as<std::int32_t>() + tokens;
    a.kv_index = ints.as<std::int32_t>() + 2 * tokens;
    a.inv_freq = dinv.as<float>();
    KvLayerView device_kv = host_kv;
    device_kv.k = static_cast<std::uint8_t*>(dk.data()) + kv_heads * d * es;
    device_kv.v = static_cast<std::uint8_t*>(dv.data()) + kv_heads * d * es;
    device_kv.dtype = dt;
    device_kv.device = Device::cuda;
    rope_kv_append_gpu(a, device_kv, nullptr);
    // Angles up to 2.2e4 rad: fp32 rounding of pos * inv_freq dominates, so
    // compare with an fp16-like tolerance even in fp32.
    const DType tol = dt == DType::f32 ? DType::f16 : dt;
    expect_close(to_host(dqkv, qkv.size(), dt), round_to(want, dt), tol, "rotated q/k in place");
    expect_close(to_host(dk, cache_elems, dt), round_to(want_k, dt), tol, "k cache");
    expect_close(to_host(dv, cache_elems, dt), round_to(want_v, dt), dt, "v cache");
  }
}

}  // namespace
}  // namespace vpod::kernels
