// The attention plan of one step, as a value: Backend::plan_attention makes it
// once per step, every layer's Backend::attention reads it, and the caller
// (engine::ModelRunner, a test, a benchmark) owns it and passes it to
// Model::forward, reusing one StepPlan across steps so its device buffers are
// sized once (they only grow, to the largest step seen).
//
// On the CUDA backend it holds the kernels' plan (src/kernels/attention:
// AttentionPlan for --attention serial, PodPlan for pod) and the device
// buffers that plan is uploaded to. The CPU backend needs no plan and leaves
// it empty; so does the CUDA backend when attention runs on the simple kernel.
#pragma once

#include <optional>

#include "cuda/device_buffer.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/pod.h"

namespace vpod::model {

struct StepPlan {
  // Planned for the current step (Model::forward clears it before planning).
  bool ready = false;
  // The step reads a paged KV cache (the plan leaves out kernels that only
  // pay off on contiguous K/V).
  bool paged_kv = false;
  // At most one is set: the kernels' plan of the step.
  std::optional<attention::AttentionPlan> serial;  // --attention serial
  std::optional<attention::PodPlan> pod;           // --attention pod
  // The plan's device copy: work lists (metadata) and split partials
  // (workspace), grow-only across steps.
  cuda::DeviceBuffer metadata;
  cuda::DeviceBuffer workspace;

  // The work lists every launch reads (null: no kernels' plan this step).
  const attention::AttentionPlan* work() const {
    return pod ? &pod->attention() : serial ? &*serial : nullptr;
  }
  attention::AttentionBuffers buffers() const {
    return {metadata.data(), metadata.bytes(), workspace.data(), workspace.bytes()};
  }
  // Forgets the step's decisions, keeps the buffers.
  void clear() {
    ready = false;
    serial.reset();
    pod.reset();
  }
};

}  // namespace vpod::model
