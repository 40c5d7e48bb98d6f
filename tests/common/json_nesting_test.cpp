// json_nesting_within: the depth guard in front of every JSON parser.
#include "common/json_nesting.h"

#include <gtest/gtest.h>

#include <string>

namespace vpod {
namespace {

TEST(JsonNesting, CountsObjectsAndArraysNotStrings) {
  EXPECT_TRUE(json_nesting_within("", 0));
  EXPECT_TRUE(json_nesting_within("{}", 1));
  EXPECT_FALSE(json_nesting_within("{}", 0));
  EXPECT_TRUE(json_nesting_within(R"({"a": [1, {"b": 2}]})", 3));
  EXPECT_FALSE(json_nesting_within(R"({"a": [1, {"b": 2}]})", 2));
  // Brackets inside strings, and escaped quotes, do not open anything.
  EXPECT_TRUE(json_nesting_within(R"({"a": "[[[[{{{{"})", 1));
  EXPECT_TRUE(json_nesting_within(R"({"a": "\"[[[["})", 1));
  // Depth falls again after a close: siblings do not add up.
  EXPECT_TRUE(json_nesting_within("[[1],[2],[3]]", 2));
}

TEST(JsonNesting, AMillionOpenBracketsIsRefusedAtTheLimit) {
  const std::string hostile(1'000'000, '[');
  EXPECT_FALSE(json_nesting_within(hostile, 64));
  EXPECT_TRUE(json_nesting_within(std::string(64, '[') + std::string(64, ']'), 64));
}

}  // namespace
}  // namespace vpod
