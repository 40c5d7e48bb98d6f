#include "common/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace vpod {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(parse_dtype("bfloat16").value(), DType::bf16);
  EXPECT_EQ(parse_dtype("F16").value(), DType::f16);
  EXPECT_EQ(parse_dtype("float32").value(), DType::f32);
  const auto bad = parse_dtype("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(bad.status().message().find("int8"), std::string::npos);
}

// Every one of the 65536 half patterns converts to float and back unchanged
// (NaNs stay NaN).
TEST(DType, HalfRoundTripsEveryPattern) {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const float f = half_bits_to_float(static_cast<std::uint16_t>(bits));
    const std::uint16_t back = float_to_half_bits(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_bits_to_float(back))) << bits;
    } else {
      ASSERT_EQ(back, bits) << "pattern " << bits << " value " << f;
    }
  }
}

TEST(DType, Bf16RoundTripsEveryPattern) {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const float f = bf16_bits_to_float(static_cast<std::uint16_t>(bits));
    const std::uint16_t back = float_to_bf16_bits(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_float(back))) << bits;
    } else {
      ASSERT_EQ(back, bits) << "pattern " << bits;
    }
  }
}

TEST(DType, HalfKnownValuesAndRounding) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);               // largest finite
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bff);              // just below: stays finite
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.5f, -25)), 0x0001);  // above the tie -> 1
  EXPECT_EQ(float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie -> even (2)
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(std::nanf("")))));
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
}

TEST(DType, Bf16KnownValuesAndRounding) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  const std::uint16_t nan_bits = float_to_bf16_bits(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(nan_bits)));  // a low-payload NaN stays NaN
}

// Random floats: the conversion picks the nearest representable value.
TEST(DType, RandomValuesRoundToNearest) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-60000.0f, 60000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = dist(rng) * (i % 3 == 0 ? 1e-4f : 1.0f);
    const float h = half_bits_to_float(float_to_half_bits(x));
    const float b = bf16_bits_to_float(float_to_bf16_bits(x));
    // No neighbour of the result is closer to x.
    const std::uint16_t hb = float_to_half_bits(x);
    for (int d : {-1, 1}) {
      const float n = half_bits_to_float(static_cast<std::uint16_t>(hb + d));
      if (!std::isnan(n) && std::signbit(n) == std::signbit(h)) {
        ASSERT_LE(std::fabs(h - x), std::fabs(n - x)) << x;
      }
    }
    EXPECT_LE(std::fabs(b - x), std::fabs(x) * std::ldexp(1.0f, -8) + 1e-38f) << x;
  }
}

TEST(DType, LoadStoreThroughBuffers) {
  std::uint16_t halves[2] = {};
  store_from_float(halves, DType::f16, 1, 0.5f);
  EXPECT_EQ(halves[1], 0x3800);
  EXPECT_EQ(load_as_float(halves, DType::f16, 1), 0.5f);
  std::uint16_t bf[1] = {};
  store_from_float(bf, DType::bf16, 0, -3.0f);
  EXPECT_EQ(load_as_float(bf, DType::bf16, 0), -3.0f);
  EXPECT_EQ(static_cast<float>(Half(0.25f)), 0.25f);
  EXPECT_EQ(static_cast<float>(BFloat16(8.0f)), 8.0f);
}

}  // namespace
}  // namespace vpod
