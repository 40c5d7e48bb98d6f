// GPU tests call VPOD_REQUIRE_GPU() first: with no usable GPU the test is
// reported as SKIPPED with the reason, never as a vacuous pass.
#pragma once

#include <gtest/gtest.h>

#include "cuda/device_info.h"

#define VPOD_REQUIRE_GPU()                                                      \
  do {                                                                          \
    const auto vpod_backend_ = ::vpod::cuda::choose_backend("auto");            \
    if (!vpod_backend_.ok() || vpod_backend_->device != ::vpod::Device::cuda) { \
      GTEST_SKIP() << "no CUDA GPU: "                                           \
                   << (vpod_backend_.ok() ? vpod_backend_->reason               \
                                          : vpod_backend_.status().message());  \
    }                                                                           \
  } while (0)
