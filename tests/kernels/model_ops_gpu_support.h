// Helpers for the non-attention kernels' GPU tests: random inputs, device
// copies in any dtype, poisoned outputs, comparisons with fp32 references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/tensor_view.h"
#include "cuda/device_buffer.h"

namespace vpod::kernels::testing {

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Rounds through `dtype` so the reference sees exactly what the GPU sees.
inline std::vector<float> round_to(const std::vector<float>& v, DType dtype) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::f32: out[i] = v[i]; break;
      case DType::f16: out[i] = half_bits_to_float(float_to_half_bits(v[i])); break;
      case DType::bf16: out[i] = bf16_bits_to_float(float_to_bf16_bits(v[i])); break;
    }
  }
  return out;
}

// A device copy of `v` in `dtype`.
inline cuda::DeviceBuffer to_device(const std::vector<float>& v, DType dtype) {
  std::vector<std::uint8_t> bytes(v.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) store_from_float(bytes.data(), dtype, i, v[i]);
  auto buffer = cuda::DeviceBuffer::allocate(std::max<std::size_t>(bytes.size(), 16));
  EXPECT_TRUE(buffer.ok());
  buffer->copy_from_host(bytes.data(), bytes.size());
  return std::move(buffer).value();
}

// A device buffer of n elements filled with NaN-ish poison (0xFF bytes).
inline cuda::DeviceBuffer poisoned(std::size_t n, DType dtype) {
  auto buffer = cuda::DeviceBuffer::allocate(std::max<std::size_t>(n * dtype_size(dtype), 16));
  EXPECT_TRUE(buffer.ok());
  buffer->fill_bytes(0xff);
  return std::move(buffer).value();
}

inline std::vector<float> to_host(const cuda::DeviceBuffer& b, std::size_t n, DType dtype) {
  std::vector<std::uint8_t> bytes(n * dtype_size(dtype));
  b.copy_to_host(bytes.data(), bytes.size());
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = load_as_float(bytes.data(), dtype, i);
  return out;
}

// Tolerance of one rounding to `dtype` of values of magnitude ~`scale`.
inline float dtype_tolerance(DType dtype, float scale) {
  switch (dtype) {
    case DType::f32: return 1e-5f * scale + 1e-6f;
    case DType::f16: return 2e-3f * scale + 1e-4f;
    case DType::bf16: return 1.6e-2f * scale + 1e-3f;
  }
  return 0;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, DType dtype,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size());
  float max_err = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float err =
        std::fabs(got[i] - want[i]) / dtype_tolerance(dtype, std::fabs(want[i]) + 1.0f);
    if (!(err <= max_err)) {
      max_err = err;
      worst = i;
    }
  }
  EXPECT_LE(max_err, 1.0f) << what << " (" << dtype_name(dtype) << "): element " << worst << " got "
                           << got[worst] << " want " << want[worst];
}

inline const DType kAllDtypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace vpod::kernels::testing
