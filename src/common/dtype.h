// Element types of tensors (weights, activations, KV cache) and their host
// conversions. Host code stores fp16/bf16 as raw 16-bit patterns; the
// conversions round to nearest even, as the GPU's cvt.rn does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace vpod {

enum class DType : std::uint8_t { f32, f16, bf16 };

constexpr std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 0;
}

// "fp32" / "fp16" / "bf16"
std::string_view dtype_name(DType dtype);
// Accepts our names and the Hugging Face / safetensors spellings:
// fp32|float32|F32, fp16|float16|half|F16, bf16|bfloat16|BF16.
Result<DType> parse_dtype(std::string_view name);

// IEEE binary16 <-> binary32.
std::uint16_t float_to_half_bits(float value);
float half_bits_to_float(std::uint16_t bits);
// bfloat16 (the top half of a binary32) <-> binary32. NaN stays NaN.
std::uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(std::uint16_t bits);

// Small value types so host code cannot mix fp16 and bf16 bit patterns.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float value) : bits(float_to_half_bits(value)) {}
  static Half from_bits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value) : bits(float_to_bf16_bits(value)) {}
  static BFloat16 from_bits(std::uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return bf16_bits_to_float(bits); }
};

// Reads element `index` of a buffer of `dtype` as float.
float load_as_float(const void* data, DType dtype, std::size_t index);
// Writes `value` (rounded to `dtype`) to element `index`.
void store_from_float(void* data, DType dtype, std::size_t index, float value);

}  // namespace vpod
