// Element types (dtype.h): their names and parsing, the fp16/bf16 bit
// conversions (round to nearest even), and element loads and stores as float.

#include "common/dtype.h"

#include <bit>
#include <cstring>
#include <string>

namespace vpod {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

Result<DType> parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "F32" || name == "float") return DType::f32;
  if (name == "fp16" || name == "float16" || name == "F16" || name == "half") return DType::f16;
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::bf16;
  return invalid_argument("unknown dtype '" + std::string(name) +
                          "' (expected fp32, fp16 or bf16)");
}

std::uint16_t float_to_half_bits(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25 rounds to 0
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent-150); half subnormal unit is 2^-24.
    const std::uint32_t shift = 126u - exponent;  // 14..24 for exponents 102..112
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  std::uint32_t result = ((abs - 0x38000000u) >> 13);
  const std::uint32_t remainder = abs & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return static_cast<std::uint16_t>(sign | result);
}

float half_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t out;
  if (exponent == 0x1fu) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else {  // subnormal: normalize
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(out);
}

std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate but keep it a (quiet) NaN
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  }
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

float load_as_float(const void* data, DType dtype, std::size_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[index];
    case DType::f16: return half_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
  }
  return 0.0f;
}

void store_from_float(void* data, DType dtype, std::size_t index, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[index] = value; return;
    case DType::f16: static_cast<std::uint16_t*>(data)[index] = float_to_half_bits(value); return;
    case DType::bf16: static_cast<std::uint16_t*>(data)[index] = float_to_bf16_bits(value); return;
  }
}

}  // namespace vpod
