// Move-only owners of a captured CUDA graph and its executable instance.
// Usage: GraphCapture capture(stream); ...launches on stream...;
//        auto exec = capture.finish(); exec->launch(stream);
#pragma once

#include <cuda_runtime_api.h>

#include "common/status.h"

namespace vpod::cuda {

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec();
  GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& other) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  explicit operator bool() const { return exec_ != nullptr; }
  void launch(cudaStream_t stream) const;

 private:
  friend class GraphCapture;
  explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  cudaGraphExec_t exec_ = nullptr;
};

// Captures the work launched on one stream (thread-local mode, so other
// threads' CUDA calls are not disturbed). A capture that is destroyed without
// finish() ends the capture and discards the graph.
class GraphCapture {
 public:
  static Result<GraphCapture> begin(cudaStream_t stream);
  ~GraphCapture();
  GraphCapture(GraphCapture&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  GraphCapture& operator=(GraphCapture&&) = delete;
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  // Ends the capture and instantiates the graph.
  Result<GraphExec> finish();

 private:
  explicit GraphCapture(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream_ = nullptr;  // null once finished
};

}  // namespace vpod::cuda
