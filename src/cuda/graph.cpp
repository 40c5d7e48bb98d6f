// The CUDA graph owners (graph.h): stream capture into a graph, instantiation,
// launch and release.

#include "cuda/graph.h"

#include <utility>

#include "common/cuda_check.h"

namespace vpod::cuda {

GraphExec::~GraphExec() {
  if (exec_ != nullptr) VPOD_CUDA_CHECK(cudaGraphExecDestroy(exec_));
}
GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) VPOD_CUDA_CHECK(cudaGraphExecDestroy(exec_));
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}
void GraphExec::launch(cudaStream_t stream) const {
  VPOD_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

Result<GraphCapture> GraphCapture::begin(cudaStream_t stream) {
  VPOD_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                            StatusCode::internal);
  return GraphCapture(stream);
}
GraphCapture::~GraphCapture() {
  if (stream_ == nullptr) return;
  cudaGraph_t graph = nullptr;
  // Abandoned capture: end it so the stream is usable again, drop the graph.
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) {
    VPOD_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  cudaGetLastError();
}
Result<GraphExec> GraphCapture::finish() {
  VPOD_CHECK_MSG(stream_ != nullptr, "GraphCapture::finish called twice");
  cudaGraph_t graph = nullptr;
  const cudaError_t end_err = cudaStreamEndCapture(std::exchange(stream_, nullptr), &graph);
  VPOD_RETURN_IF_ERROR(cuda_status(end_err, "cudaStreamEndCapture", StatusCode::internal));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst_err = cudaGraphInstantiate(&exec, graph, 0);
  VPOD_CUDA_CHECK(cudaGraphDestroy(graph));
  VPOD_RETURN_IF_ERROR(cuda_status(inst_err, "cudaGraphInstantiate", StatusCode::internal));
  return GraphExec(exec);
}

}  // namespace vpod::cuda
