// The CUDA, driver, cuBLAS and NCCL checks (cuda_check.h): each library's error
// message, and the Status conversions for failures that are expected at a boundary.

#include "common/cuda_check.h"

#include <cudaTypedefs.h>

#include <fmt/format.h>

namespace vpod {
namespace {

// cuGetErrorName/cuGetErrorString come from the driver through an entry point,
// so this works (and says so) on a machine with no driver.
template <typename Fn>
Fn driver_entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, CUDART_VERSION, cudaEnableDefault, &query) !=
          cudaSuccess ||
      query != cudaDriverEntryPointSuccess) {
    cudaGetLastError();  // clear the sticky-free error this may leave behind
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

std::string cuda_error_message(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
}

std::string cu_error_message(CUresult err) {
  static const auto get_name = driver_entry_point<PFN_cuGetErrorName_v6000>("cuGetErrorName");
  static const auto get_string = driver_entry_point<PFN_cuGetErrorString_v6000>("cuGetErrorString");
  const char* name = nullptr;
  const char* text = nullptr;
  if (get_name != nullptr) get_name(err, &name);
  if (get_string != nullptr) get_string(err, &text);
  if (name == nullptr)
    return fmt::format("CUresult {} (no driver to describe it)", static_cast<int>(err));
  return fmt::format("{} ({})", name, text != nullptr ? text : "no description");
}

std::string cublas_error_message(cublasStatus_t err) {
  // cuBLAS is loaded on demand by the CUDA backend, so its own
  // cublasGetStatusString may not be linked; the names are stable API.
  switch (err) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED (library not initialized)";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED (resource allocation failed)";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as an argument)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH (architecture mismatch)";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR (an access to GPU memory space failed)";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED (the GPU program failed to execute)";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR (an internal operation failed)";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return fmt::format("cublasStatus_t {}", static_cast<int>(err));
}

std::string nccl_error_message(ncclResult_t err) {
  switch (err) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError (a call to a CUDA function failed)";
    case ncclSystemError: return "ncclSystemError (a call to the system failed)";
    case ncclInternalError: return "ncclInternalError (internal check failed)";
    case ncclInvalidArgument: return "ncclInvalidArgument (invalid argument)";
    case ncclInvalidUsage: return "ncclInvalidUsage (invalid usage)";
    case ncclRemoteError:
      return "ncclRemoteError (remote process exited or there was a network error)";
    case ncclInProgress: return "ncclInProgress (NCCL operation in progress)";
    default: break;
  }
  return fmt::format("ncclResult_t {}", static_cast<int>(err));
}

Status cuda_status(cudaError_t err, const char* statement, StatusCode code) {
  if (err == cudaSuccess) return {};
  return {code, fmt::format("{}: {}", statement, cuda_error_message(err))};
}

Status cu_status(CUresult err, const char* statement, StatusCode code) {
  if (err == CUDA_SUCCESS) return {};
  return {code, fmt::format("{}: {}", statement, cu_error_message(err))};
}

}  // namespace vpod
