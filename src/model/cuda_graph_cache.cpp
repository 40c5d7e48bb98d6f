// CUDA graphs of whole decode steps, cached by launch shape (see
// cuda_graph_cache.h).
#include "model/cuda_graph_cache.h"

#include <algorithm>

#include "common/check.h"

namespace vpod::model {

StepGraphKey make_step_graph_key(const StepTensors& step, const StepPlan& plan,
                                 std::uint64_t caller_key) {
  StepGraphKey key;
  key.num_tokens = step.num_tokens;
  key.num_sequences = step.num_sequences;
  key.num_logit_rows = step.num_logit_rows;
  key.caller_key = caller_key;
  if (const attention::AttentionPlan* work = plan.ready ? plan.work() : nullptr) {
    key.prefill_items = static_cast<int>(work->prefill_items().size());
    key.decode_items = static_cast<int>(work->decode_items().size());
    key.prefill_combines = static_cast<int>(work->prefill_combines().size());
    key.decode_combines = static_cast<int>(work->decode_combines().size());
    key.partial_rows = work->partial_rows();
    key.plan_metadata = plan.metadata.data();
    key.plan_workspace = plan.workspace.data();
  }
  if (plan.ready && plan.kind == StepPlan::Kind::flashinfer) {
    key.flashinfer_plan = plan.paged.launch_key();
  }
  if (plan.ready && plan.kind == StepPlan::Kind::pod) {
    const attention::PodConfig& pc = plan.pod.config();
    key.pod_mode = static_cast<int>(pc.mode);
    key.pod_grid = pc.grid;
    key.pod_prefill_ctas = pc.prefill_ctas;
    key.pod_ratio = static_cast<int>(pc.ratio);
  }
  return key;
}

StepGraphCache::~StepGraphCache() = default;

StepGraph StepGraphCache::lookup(const StepGraphKey& key) {
  pending_ = key;
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    it->second.last_use = ++clock_;
    it->second.exec.launch(stream_);
    ++stats_.launched;
    return StepGraph::launched;
  }
  if (seen_.count(key) != 0) return StepGraph::capture;
  if (seen_.size() >= kMaxSeenShapes) seen_.clear();
  seen_.insert(key);
  return StepGraph::eager;
}

Status StepGraphCache::begin_capture() {
  VPOD_CHECK(!capture_.has_value());
  VPOD_ASSIGN_OR_RETURN(cuda::GraphCapture capture, cuda::GraphCapture::begin(stream_));
  capture_.emplace(std::move(capture));
  return {};
}

Status StepGraphCache::end_capture() {
  VPOD_CHECK(capture_.has_value());
  Result<cuda::GraphExec> exec = capture_->finish();
  capture_.reset();
  VPOD_RETURN_IF_ERROR(exec.status());
  if (static_cast<int>(graphs_.size()) >= max_graphs_) {
    auto oldest = std::min_element(
        graphs_.begin(), graphs_.end(),
        [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    graphs_.erase(oldest);
  }
  Entry& entry = graphs_[pending_];
  entry.exec = std::move(exec).value();
  entry.last_use = ++clock_;
  ++stats_.captured;
  entry.exec.launch(stream_);
  ++stats_.launched;
  return {};
}

void StepGraphCache::cancel_capture() { capture_.reset(); }

void StepGraphCache::clear() {
  graphs_.clear();
  seen_.clear();
}

StepGraphStats StepGraphCache::stats() const {
  StepGraphStats s = stats_;
  s.cached = static_cast<int>(graphs_.size());
  return s;
}

}  // namespace vpod::model
