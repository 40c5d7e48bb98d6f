// cuBLASLt, loaded at run time (dlopen of libcublasLt.so.13, then
// /usr/local/cuda/lib64): vpod never links cuBLAS, so the binary starts on
// machines without it and build/ stays small. Only the entry points the
// model's GEMMs need are resolved.
//
// gemm(): out[M, N] = x[M, K] * w[N, K]^T (+ bias[N]), row-major, fp32
// accumulation; x/w in f16, bf16 or f32 (f32 uses CUBLAS_COMPUTE_32F, no
// TF32), out in the same dtype or f32. Heuristic choices are cached per shape.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "common/status.h"
#include "common/tensor_view.h"

namespace vpod::kernels {

class CublasLt {
 public:
  // Loads the library and creates a handle; unavailable when it is absent.
  static Result<std::unique_ptr<CublasLt>> create(std::size_t workspace_bytes = 32u << 20);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Where the library was found.
  const std::string& library_path() const { return path_; }

  // Enqueues the GEMM on `stream`. A shape no algorithm supports is a Status.
  Status gemm(const TensorView& x, const TensorView& w, const TensorView* bias,
              const TensorView& out, cudaStream_t stream);

 private:
  struct Api;
  struct Plan;
  CublasLt() = default;
  Result<Plan*> plan_for(const TensorView& x, const TensorView& w, bool bias,
                         const TensorView& out);

  std::unique_ptr<Api> api_;
  std::string path_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::mutex mutex_;
  std::map<std::tuple<long, long, long, long, long, long, int, int, int, bool>,
           std::unique_ptr<Plan>>
      plans_;
};

}  // namespace vpod::kernels
