// Real GPU tests: a kernel writes through a device buffer, the host reads it
// back; a captured graph replays; events order and time; the driver API
// reached through entry points reports VMM support and its granularity.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "common/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/event.h"
#include "cuda/graph.h"
#include "cuda/stream.h"
#include "support/gpu.h"

namespace vpod::cuda {
namespace {

// out[i] = a * in[i] + i
__global__ void affine_kernel(const float* in, float* out, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * in[i] + static_cast<float>(i);
}

void launch_affine(const DeviceBuffer& in, DeviceBuffer& out, float a, int n, cudaStream_t s) {
  affine_kernel<<<(n + 255) / 256, 256, 0, s>>>(in.as<float>(), out.as<float>(), a, n);
  VPOD_CUDA_CHECK_LAUNCH();
}

TEST(CudaGpu, KernelWritesThroughDeviceBuffer) {
  VPOD_REQUIRE_GPU();
  constexpr int n = 100003;  // not a multiple of the block size
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> input(n);
  for (float& x : input) x = dist(rng);

  auto in = DeviceBuffer::allocate(n * sizeof(float));
  auto out = DeviceBuffer::allocate(n * sizeof(float));
  ASSERT_TRUE(in.ok() && out.ok());
  in->copy_from_host(input.data(), n * sizeof(float));
  out->fill_bytes(0xff);  // poison: NaN everywhere
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  launch_affine(*in, *out, 3.0f, n, stream->get());
  stream->synchronize();

  std::vector<float> result(n);
  out->copy_to_host(result.data(), n * sizeof(float));
  // nvcc contracts a * x + i into one fused multiply-add; so does std::fma.
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(result[i], std::fma(3.0f, input[i], static_cast<float>(i))) << i;
  }
}

TEST(CudaGpu, GraphCaptureReplaysAndEventsTime) {
  VPOD_REQUIRE_GPU();
  constexpr int n = 4096;
  auto in = DeviceBuffer::allocate(n * sizeof(float));
  auto out = DeviceBuffer::allocate(n * sizeof(float));
  ASSERT_TRUE(in.ok() && out.ok());
  std::vector<float> ones(n, 1.0f);
  in->copy_from_host(ones.data(), n * sizeof(float));
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());

  auto capture = GraphCapture::begin(stream->get());
  ASSERT_TRUE(capture.ok());
  launch_affine(*in, *out, 2.0f, n, stream->get());
  auto exec = capture->finish();
  ASSERT_TRUE(exec.ok()) << exec.status().to_string();

  out->fill_bytes(0xff, stream->get());
  auto start = Event::create(Event::Timing::enabled);
  auto stop = Event::create(Event::Timing::enabled);
  ASSERT_TRUE(start.ok() && stop.ok());
  start->record(stream->get());
  exec->launch(stream->get());
  stop->record(stream->get());
  stop->synchronize();
  EXPECT_TRUE(stop->query());
  EXPECT_GE(Event::elapsed_ms(*start, *stop), 0.0f);

  std::vector<float> result(n);
  out->copy_to_host(result.data(), n * sizeof(float));
  for (int i = 0; i < n; ++i) ASSERT_EQ(result[i], 2.0f + static_cast<float>(i));
}

TEST(CudaGpu, DeviceInfoReportsVmm) {
  VPOD_REQUIRE_GPU();
  auto gpus = query_gpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status().to_string();
  ASSERT_FALSE(gpus->empty());
  const GpuInfo& gpu = gpus->front();
  EXPECT_GT(gpu.sm_count, 0);
  EXPECT_TRUE(gpu.vmm_supported);
  EXPECT_GT(gpu.vmm_granularity_min_bytes, 0u);
  EXPECT_EQ(gpu.vmm_granularity_recommended_bytes % gpu.vmm_granularity_min_bytes, 0u);
}

TEST(CudaGpu, HugeAllocationIsAStatusNotACrash) {
  VPOD_REQUIRE_GPU();
  auto huge = DeviceBuffer::allocate(std::size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::resource_exhausted);
  EXPECT_NE(huge.status().message().find("out of memory"), std::string::npos)
      << huge.status().message();
  auto fine = DeviceBuffer::allocate(1024);  // the context is still healthy
  EXPECT_TRUE(fine.ok());
}

}  // namespace
}  // namespace vpod::cuda
