#include "common/status.h"

#include <gtest/gtest.h>

namespace vpod {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("expected a positive number, got " + std::to_string(x));
  return x;
}

Result<int> doubled(int x) {
  VPOD_ASSIGN_OR_RETURN(int value, parse_positive(x));
  return value * 2;
}

Status check_both(int a, int b) {
  VPOD_RETURN_IF_ERROR(parse_positive(a).status());
  VPOD_RETURN_IF_ERROR(parse_positive(b).status().with_context("second"));
  return {};
}

TEST(Status, CarriesCodeAndMessage) {
  const Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "ok");
  const Status s = resource_exhausted("no free KV pages");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted);
  EXPECT_EQ(s.to_string(), "resource_exhausted: no free KV pages");
  EXPECT_EQ(s.with_context("slot 3").message(), "slot 3: no free KV pages");
}

TEST(Status, ResultPropagates) {
  EXPECT_EQ(doubled(4).value(), 8);
  const auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "expected a positive number, got -1");
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, 0).message(), "second: expected a positive number, got 0");
}

TEST(StatusDeathTest, ValueOfAnErrorIsAnInvariantViolation) {
  const auto bad = parse_positive(0);
  EXPECT_DEATH((void)bad.value(), "Result::value\\(\\) on error: invalid_argument");
}

}  // namespace
}  // namespace vpod
