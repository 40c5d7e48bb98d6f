// Backend selection is well defined on every machine, GPU or not.
#include "cuda/device_info.h"

#include <gtest/gtest.h>

namespace vpod::cuda {
namespace {

TEST(DeviceInfo, CpuIsAlwaysAvailableWhenRequested) {
  const auto choice = choose_backend("cpu");
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->device, Device::cpu);
}

TEST(DeviceInfo, AutoPicksABackendAndSaysWhy) {
  const auto choice = choose_backend("auto");
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  EXPECT_FALSE(choice->reason.empty());
  if (choice->device == Device::cpu) {
    EXPECT_NE(choice->reason.find("CPU backend"), std::string::npos) << choice->reason;
    EXPECT_FALSE(choose_backend("cuda").ok());  // explicit cuda without a GPU is an error
  }
}

TEST(DeviceInfo, UnknownDeviceIsRejected) {
  const auto choice = choose_backend("tpu");
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(choice.status().message().find("tpu"), std::string::npos);
}

}  // namespace
}  // namespace vpod::cuda
