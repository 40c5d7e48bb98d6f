// The model's GPU GEMMs through cuBLASLt (cublaslt.h): loading the library at
// run time, one cached matmul plan per shape, and the GEMM call itself.

#include "kernels/gemm/cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "common/cuda_check.h"

namespace vpod::kernels {

struct CublasLt::Api {
  void* lib = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  ~Api() {
    if (lib != nullptr) dlclose(lib);
  }
};

// One shape's descriptors and chosen algorithm.
struct CublasLt::Plan {
  Api* api = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc != nullptr) api->desc_destroy(desc);
    if (a != nullptr) api->layout_destroy(a);
    if (b != nullptr) api->layout_destroy(b);
    if (c != nullptr) api->layout_destroy(c);
  }
};

namespace {

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

Status lt_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return internal_error(std::string("cuBLASLt ") + what + ": " + cublas_error_message(s));
}

}  // namespace

Result<std::unique_ptr<CublasLt>> CublasLt::create(std::size_t workspace_bytes) {
  auto api = std::make_unique<Api>();
  std::string path;
  for (const char* name : {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"}) {
    api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (api->lib != nullptr) {
      path = name;
      break;
    }
  }
  if (api->lib == nullptr) {
    return unavailable(
        "cuBLASLt not found (dlopen libcublasLt.so.13 and "
        "/usr/local/cuda/lib64/libcublasLt.so.13 failed); install the CUDA 13 cuBLAS library");
  }
  bool missing = false;
  std::string missing_name;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->lib, name));
    if (fn == nullptr && !missing) {
      missing = true;
      missing_name = name;
    }
  };
  resolve(api->create, "cublasLtCreate");
  resolve(api->destroy, "cublasLtDestroy");
  resolve(api->desc_create, "cublasLtMatmulDescCreate");
  resolve(api->desc_destroy, "cublasLtMatmulDescDestroy");
  resolve(api->desc_set, "cublasLtMatmulDescSetAttribute");
  resolve(api->layout_create, "cublasLtMatrixLayoutCreate");
  resolve(api->layout_destroy, "cublasLtMatrixLayoutDestroy");
  resolve(api->pref_create, "cublasLtMatmulPreferenceCreate");
  resolve(api->pref_destroy, "cublasLtMatmulPreferenceDestroy");
  resolve(api->pref_set, "cublasLtMatmulPreferenceSetAttribute");
  resolve(api->heuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(api->matmul, "cublasLtMatmul");
  if (missing) return unavailable(path + " lacks " + missing_name);

  std::unique_ptr<CublasLt> lt(new CublasLt());
  lt->path_ = path;
  cublasLtHandle_t handle = nullptr;
  VPOD_RETURN_IF_ERROR(lt_status(api->create(&handle), "cublasLtCreate"));
  lt->handle_ = handle;
  lt->api_ = std::move(api);
  if (workspace_bytes > 0) {
    VPOD_CUDA_RETURN_IF_ERROR(cudaMalloc(&lt->workspace_, workspace_bytes),
                              StatusCode::resource_exhausted);
    lt->workspace_bytes_ = workspace_bytes;
  }
  return lt;
}

CublasLt::~CublasLt() {
  plans_.clear();
  if (handle_ != nullptr) api_->destroy(static_cast<cublasLtHandle_t>(handle_));
  if (workspace_ != nullptr) cudaFree(workspace_);
}

Result<CublasLt::Plan*> CublasLt::plan_for(const TensorView& x, const TensorView& w, bool bias,
                                           const TensorView& out) {
  const long m = static_cast<long>(x.size(0));
  const long n = static_cast<long>(w.size(0));
  const long k = static_cast<long>(x.size(1));
  const auto key =
      std::make_tuple(m, n, k, static_cast<long>(x.stride(0)), static_cast<long>(w.stride(0)),
                      static_cast<long>(out.stride(0)), static_cast<int>(x.dtype()),
                      static_cast<int>(w.dtype()), static_cast<int>(out.dtype()), bias);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  plan->api = api_.get();
  const bool fp32 = x.dtype() == DType::f32;
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  VPOD_RETURN_IF_ERROR(
      lt_status(api_->desc_create(&plan->desc, compute, CUDA_R_32F), "MatmulDescCreate"));
  (void)fp32;
  // Column-major view: out^T[N, M] = w[N, K] (stored as K x N, transposed) * x^T[K, M].
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  VPOD_RETURN_IF_ERROR(
      lt_status(api_->desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
                "TRANSA"));
  VPOD_RETURN_IF_ERROR(
      lt_status(api_->desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
                "TRANSB"));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    VPOD_RETURN_IF_ERROR(lt_status(
        api_->desc_set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
        "EPILOGUE"));
    const cudaDataType_t bias_type = cuda_type(out.dtype());
    VPOD_RETURN_IF_ERROR(lt_status(api_->desc_set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bias_type, sizeof(bias_type)),
                                   "BIAS_DATA_TYPE"));
  }
  VPOD_RETURN_IF_ERROR(lt_status(
      api_->layout_create(&plan->a, cuda_type(w.dtype()), k, n, w.stride(0)), "layout A"));
  VPOD_RETURN_IF_ERROR(lt_status(
      api_->layout_create(&plan->b, cuda_type(x.dtype()), k, m, x.stride(0)), "layout B"));
  VPOD_RETURN_IF_ERROR(lt_status(
      api_->layout_create(&plan->c, cuda_type(out.dtype()), n, m, out.stride(0)), "layout C"));

  cublasLtMatmulPreference_t pref = nullptr;
  VPOD_RETURN_IF_ERROR(lt_status(api_->pref_create(&pref), "PreferenceCreate"));
  std::size_t ws = workspace_bytes_;
  api_->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs =
      api_->heuristic(static_cast<cublasLtHandle_t>(handle_), plan->desc, plan->a, plan->b, plan->c,
                      plan->c, pref, 1, &result, &found);
  api_->pref_destroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    return unimplemented("cuBLASLt has no algorithm for x " + x.to_string() + " * w " +
                         w.to_string() + "^T -> " + out.to_string());
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

Status CublasLt::gemm(const TensorView& x, const TensorView& w, const TensorView* bias,
                      const TensorView& out, cudaStream_t stream) {
  if (x.rank() != 2 || w.rank() != 2 || out.rank() != 2 || x.size(1) != w.size(1) ||
      out.size(0) != x.size(0) || out.size(1) != w.size(0) || x.stride(1) != 1 ||
      w.stride(1) != 1 || out.stride(1) != 1 || x.dtype() != w.dtype() ||
      (out.dtype() != x.dtype() && out.dtype() != DType::f32) ||
      (bias != nullptr && (bias->numel() != w.size(0) || bias->dtype() != out.dtype()))) {
    return invalid_argument("gemm shapes: x " + x.to_string() + ", w " + w.to_string() + ", out " +
                            out.to_string());
  }
  if (x.size(0) == 0) return {};
  VPOD_ASSIGN_OR_RETURN(Plan * plan, plan_for(x, w, bias != nullptr, out));
  if (bias != nullptr) {
    const void* ptr = bias->data();
    VPOD_RETURN_IF_ERROR(
        lt_status(api_->desc_set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr)),
                  "BIAS_POINTER"));
  }
  const float alpha = 1.0f, beta = 0.0f;
  return lt_status(
      api_->matmul(static_cast<cublasLtHandle_t>(handle_), plan->desc, &alpha, w.data(), plan->a,
                   x.data(), plan->b, &beta, out.data(), plan->c, out.data(), plan->c, &plan->algo,
                   workspace_, workspace_bytes_, stream),
      "cublasLtMatmul");
}

}  // namespace vpod::kernels
