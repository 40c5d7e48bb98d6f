#include "common/tensor_view.h"

#include <gtest/gtest.h>

#include <vector>

namespace vpod {
namespace {

TEST(TensorView, ContiguousStridesAndOffsets) {
  std::vector<float> data(2 * 3 * 4);
  TensorView t(data.data(), DType::f32, {2, 3, 4});
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.offset_of({1, 2, 3}), 23);
  t.set({1, 2, 3}, 7.5f);
  EXPECT_EQ(data[23], 7.5f);
  EXPECT_EQ(t.get({1, 2, 3}), 7.5f);
}

// A KV-cache-like all-layers view: [slots, ctx, layers, heads, dim], and the
// per-layer view of layer 1 taken from it is strided, not contiguous.
TEST(TensorView, SelectAndSliceGiveStridedViews) {
  constexpr int slots = 2, ctx = 3, layers = 2, heads = 2, dim = 4;
  std::vector<std::uint16_t> storage(slots * ctx * layers * heads * dim);
  TensorView all(storage.data(), DType::f16, {slots, ctx, layers, heads, dim});
  TensorView layer1 = all.select(2, 1);  // [slots, ctx, heads, dim]
  EXPECT_EQ(layer1.rank(), 4);
  EXPECT_EQ(layer1.stride(1), layers * heads * dim);  // token stride
  EXPECT_FALSE(layer1.is_contiguous());
  layer1.set({1, 2, 1, 3}, 2.0f);
  EXPECT_EQ(all.get({1, 2, 1, 1, 3}), 2.0f);
  EXPECT_EQ(all.get({1, 2, 0, 1, 3}), 0.0f);

  TensorView tail = layer1.slice(1, 1, 2);  // tokens 1..2
  EXPECT_EQ(tail.size(1), 2);
  EXPECT_EQ(tail.get({1, 1, 1, 3}), 2.0f);
  EXPECT_EQ(tail.to_string(), "fp16[2, 2, 2, 4] strides [48, 16, 4, 1] on cpu");
}

TEST(TensorView, ExplicitStrides) {
  std::vector<float> data(10);
  for (int i = 0; i < 10; ++i) data[i] = static_cast<float>(i);
  TensorView every_other(data.data(), DType::f32, {5}, {2});
  EXPECT_EQ(every_other.get({4}), 8.0f);
  EXPECT_FALSE(every_other.is_contiguous());
  EXPECT_EQ(*every_other.ptr<float>({3}), 6.0f);
}

TEST(TensorViewDeathTest, OutOfBoundsIsAnInvariantViolation) {
  std::vector<float> data(6);
  TensorView t(data.data(), DType::f32, {2, 3});
  EXPECT_DEATH((void)t.offset_of({2, 0}), "tensor index out of bounds");
  EXPECT_DEATH((void)t.select(1, 3), "select index out of bounds");
  EXPECT_DEATH((void)t.ptr<std::uint16_t>({0, 0}), "sizeof\\(T\\) == dtype_size");
}

}  // namespace
}  // namespace vpod
