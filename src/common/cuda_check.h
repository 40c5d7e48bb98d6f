// Check macros for the CUDA runtime, the CUDA driver (reached through entry
// points, never linked), cuBLAS and NCCL. Each failure reports the statement,
// file, line and the library's own message, then aborts (internal invariant).
// Where a failure is an expected outcome at a boundary (out of device memory,
// a driver refusing a mapping), use the *_status() functions instead: they turn
// the same report into a Status the caller can return.
#pragma once

#include <cublas_api.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "common/check.h"
#include "common/status.h"

namespace vpod {

// "cudaErrorMemoryAllocation (out of memory)"
std::string cuda_error_message(cudaError_t err);
// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; works without a driver.
std::string cu_error_message(CUresult err);
// "CUBLAS_STATUS_NOT_SUPPORTED"
std::string cublas_error_message(cublasStatus_t err);
// "ncclUnhandledCudaError (...)"
std::string nccl_error_message(ncclResult_t err);

// Status-returning forms: ok, or `code` with "statement: message".
Status cuda_status(cudaError_t err, const char* statement, StatusCode code = StatusCode::internal);
Status cu_status(CUresult err, const char* statement, StatusCode code = StatusCode::internal);

}  // namespace vpod

#define VPOD_CUDA_CHECK(stmt)                                                                    \
  do {                                                                                           \
    cudaError_t vpod_err_ = (stmt);                                                              \
    if (vpod_err_ != cudaSuccess) [[unlikely]]                                                   \
      ::vpod::detail::check_failed("CUDA runtime", #stmt, ::vpod::cuda_error_message(vpod_err_), \
                                   __FILE__, __LINE__);                                          \
  } while (0)

// After every kernel launch: reports launch-configuration errors at the launch
// site instead of at the next unrelated call.
#define VPOD_CUDA_CHECK_LAUNCH() VPOD_CUDA_CHECK(cudaGetLastError())

#define VPOD_CU_CHECK(stmt)                                                                   \
  do {                                                                                        \
    CUresult vpod_err_ = (stmt);                                                              \
    if (vpod_err_ != CUDA_SUCCESS) [[unlikely]]                                               \
      ::vpod::detail::check_failed("CUDA driver", #stmt, ::vpod::cu_error_message(vpod_err_), \
                                   __FILE__, __LINE__);                                       \
  } while (0)

#define VPOD_CUBLAS_CHECK(stmt)                                                              \
  do {                                                                                       \
    cublasStatus_t vpod_err_ = (stmt);                                                       \
    if (vpod_err_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                     \
      ::vpod::detail::check_failed("cuBLAS", #stmt, ::vpod::cublas_error_message(vpod_err_), \
                                   __FILE__, __LINE__);                                      \
  } while (0)

#define VPOD_NCCL_CHECK(stmt)                                                                      \
  do {                                                                                             \
    ncclResult_t vpod_err_ = (stmt);                                                               \
    if (vpod_err_ != ncclSuccess) [[unlikely]]                                                     \
      ::vpod::detail::check_failed("NCCL", #stmt, ::vpod::nccl_error_message(vpod_err_), __FILE__, \
                                   __LINE__);                                                      \
  } while (0)

// Status-returning: `VPOD_CU_RETURN_IF_ERROR(cuMemMap(...), StatusCode::resource_exhausted);`
#define VPOD_CUDA_RETURN_IF_ERROR(stmt, code) \
  VPOD_RETURN_IF_ERROR(::vpod::cuda_status((stmt), #stmt, (code)))
#define VPOD_CU_RETURN_IF_ERROR(stmt, code) \
  VPOD_RETURN_IF_ERROR(::vpod::cu_status((stmt), #stmt, (code)))
