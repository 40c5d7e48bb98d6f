// The attention plan of one step, as a value: Backend::plan_attention makes it
// once per step, every layer's Backend::attention reads it, and the caller
// (engine::ModelRunner, a test, a benchmark) owns it and passes it to
// Model::forward, reusing one StepPlan across steps so its device buffers are
// sized once (they only grow, to the largest step seen).
//
// On the CUDA backend it holds the kernels' plan (src/kernels/attention:
// AttentionPlan for --attention serial, PodPlan for pod, over a contiguous
// cache; FlashInfer's PagedPlan over a paged one: its serial kernels, or its
// POD kernel for hybrid steps with --attention pod)
// and the device buffers that plan is uploaded to. The CPU backend needs no plan and leaves
// it empty; so does the CUDA backend when attention runs on the simple kernel.
#pragma once

#include <cstdint>

#include "cuda/device_buffer.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/flashinfer/paged_plan.h"
#include "kernels/attention/pod.h"

namespace vpod::model {

struct StepPlan {
  // Which kernels' plan the step has (none: the simple kernel, or the CPU).
  enum class Kind : std::uint8_t { none, serial, pod, flashinfer };

  // Planned for the current step (Model::forward clears it before planning).
  bool ready = false;
  // The step reads a paged KV cache (the plan leaves out kernels that only
  // pay off on contiguous K/V).
  bool paged_kv = false;
  Kind kind = Kind::none;
  // The kernels' plans, built into in place each step (their vectors keep
  // their capacity, so a warmed-up step allocates nothing); `kind` says which
  // one holds this step's decisions.
  attention::AttentionPlan serial;  // --attention serial
  attention::PodPlan pod;           // --attention pod
  attention::fi::PagedPlan paged;   // a paged KV cache (owns its buffers)
  // The plan's device copy: work lists (metadata) and split partials
  // (workspace), grow-only across steps.
  cuda::DeviceBuffer metadata;
  cuda::DeviceBuffer workspace;

  // The work lists every launch reads (null: no kernels' plan this step).
  const attention::AttentionPlan* work() const {
    switch (kind) {
      case Kind::serial: return &serial;
      case Kind::pod: return &pod.attention();
      case Kind::flashinfer:
      case Kind::none: break;
    }
    return nullptr;
  }
  attention::AttentionBuffers buffers() const {
    return {metadata.data(), metadata.bytes(), workspace.data(), workspace.bytes()};
  }
  // Forgets the step's decisions, keeps the plans' memory and the buffers.
  void clear() {
    ready = false;
    kind = Kind::none;
  }
};

}  // namespace vpod::model
