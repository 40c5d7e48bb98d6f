// The check macros report the statement, the file and line, and the library's
// own message. cudaSetDevice(-1) etc. fail with or without a GPU, so these run
// everywhere.
#include "common/cuda_check.h"

#include <gtest/gtest.h>

namespace vpod {
namespace {

TEST(CheckDeathTest, VpodCheckReportsStatementFileAndLine) {
  const int answer = 41;
  EXPECT_DEATH(VPOD_CHECK(answer == 42),
               "vpod error at .*check_test.cpp:[0-9]+\n"
               "  statement: answer == 42");
  EXPECT_DEATH(VPOD_CHECK_MSG(answer > 100, "answer too small"), "message:   answer too small");
}

TEST(CheckDeathTest, CudaRuntimeCheckReportsLibraryMessage) {
  EXPECT_DEATH(VPOD_CUDA_CHECK(cudaSetDevice(-1)),
               "CUDA runtime error at .*check_test.cpp:[0-9]+\n"
               "  statement: cudaSetDevice\\(-1\\)\n"
               "  message:   cudaError");
}

TEST(CheckDeathTest, DriverCheckReportsNameOrNoDriver) {
  EXPECT_DEATH(VPOD_CU_CHECK(CUDA_ERROR_OUT_OF_MEMORY),
               "CUDA driver error at .*statement: CUDA_ERROR_OUT_OF_MEMORY\n"
               "  message:   (CUDA_ERROR_OUT_OF_MEMORY \\(out of memory\\)|CUresult 2 \\(no "
               "driver to describe it\\))");
}

TEST(CheckDeathTest, CublasAndNcclChecksReportLibraryMessages) {
  EXPECT_DEATH(VPOD_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED),
               "cuBLAS error at .*message:   CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_DEATH(VPOD_NCCL_CHECK(ncclInvalidArgument),
               "NCCL error at .*message:   ncclInvalidArgument \\(invalid argument\\)");
}

TEST(Check, PassingChecksDoNothing) {
  VPOD_CHECK(1 + 1 == 2);
  VPOD_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS);
  VPOD_NCCL_CHECK(ncclSuccess);
  VPOD_CU_CHECK(CUDA_SUCCESS);
}

TEST(Check, StatusFormsCarryTheMessage) {
  const Status s =
      cuda_status(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", StatusCode::resource_exhausted);
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted);
  EXPECT_EQ(s.message(), "cudaMalloc(&p, n): cudaErrorMemoryAllocation (out of memory)");
  EXPECT_TRUE(cu_status(CUDA_SUCCESS, "x").ok());
}

}  // namespace
}  // namespace vpod
