// TensorParallelGroup (tensor_parallel_group.h): building the ranks in
// phases that cannot deadlock, and the step on every rank's thread.
#include "engine/tensor_parallel_group.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "common/check.h"
#include "model/nccl_communicator.h"

namespace vpod::engine {

Result<std::unique_ptr<TensorParallelGroup>> TensorParallelGroup::create(
    const TensorParallelGroupOptions& o) {
  if (o.size < 2) return invalid_argument("a tensor-parallel group needs at least 2 ranks");
  VPOD_CHECK(o.make_backend != nullptr);
  const int n = o.size;
  if (o.device == Device::cuda) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (devices < n) {
      return invalid_argument(
          fmt::format("--tensor-parallel-size {} needs {} GPUs, {} found", n, n, devices));
    }
    VPOD_RETURN_IF_ERROR(model::load_nccl());
  }
  std::unique_ptr<TensorParallelGroup> g(new TensorParallelGroup());
  const Device device = o.device;
  g->device_ = device;
  g->threads_ = std::make_unique<RankThreads>(n, [device](int rank) {
    if (device == Device::cuda) cudaSetDevice(rank);
  });
  g->backends_.resize(n);
  g->comms_.resize(n);
  g->models_.resize(n);
  RankThreads& threads = *g->threads_;

  // 1. Backends (rank 0's thread is the caller: make its device current).
  VPOD_RETURN_IF_ERROR(threads.run_all([&](int r) -> Status {
    if (device == Device::cuda && r == 0 && cudaSetDevice(0) != cudaSuccess) {
      return unavailable("cannot select CUDA device 0");
    }
    VPOD_ASSIGN_OR_RETURN(g->backends_[r], o.make_backend(r));
    return {};
  }));
  // 2. Communicators. NCCL's init returns once every rank has joined, so it
  // starts only when every backend exists.
  if (device == Device::cpu) {
    g->comms_ = model::make_local_communicators(n);
  } else {
    VPOD_ASSIGN_OR_RETURN(const model::NcclId id, model::nccl_unique_id());
    VPOD_RETURN_IF_ERROR(threads.run_all([&](int r) -> Status {
      VPOD_ASSIGN_OR_RETURN(g->comms_[r],
                            model::make_nccl_communicator(id, r, n, g->backends_[r]->stream()));
      return {};
    }));
  }
  // 3. Each rank's shard (no collectives while loading).
  VPOD_RETURN_IF_ERROR(threads.run_all([&](int r) -> Status {
    model::ModelOptions mo = o.model;
    mo.tensor_parallel = {.rank = r, .size = n, .comm = g->comms_[r].get()};
    VPOD_ASSIGN_OR_RETURN(g->models_[r], model::Model::load(o.model_dir, *g->backends_[r], mo));
    return {};
  }));
  return g;
}

TensorParallelGroup::~TensorParallelGroup() {
  if (!threads_) return;
  (void)threads_->run_all([&](int r) -> Status {
    if (r < static_cast<int>(runners_.size())) runners_[r].reset();
    if (r < static_cast<int>(models_.size())) models_[r].reset();
    if (r < static_cast<int>(comms_.size())) comms_[r].reset();
    if (r < static_cast<int>(backends_.size())) backends_[r].reset();
    return {};
  });
}

void TensorParallelGroup::attach_kv(const kvcache::ReplicatedKvStore& store) {
  VPOD_CHECK(store.num_ranks() == size() && runners_.empty());
  for (int r = 0; r < size(); ++r) kv_.push_back(store.rank_view(r));
  for (int r = 0; r < size(); ++r) {
    runners_.push_back(std::make_unique<ModelRunner>(*models_[r], kv_[r]));
  }
}

void TensorParallelGroup::set_logits_observer(LogitsObserver observer) {
  VPOD_CHECK(!runners_.empty());
  runners_[0]->set_logits_observer(std::move(observer));
}

Status TensorParallelGroup::forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                                    std::span<SampledToken> out, const PromptScores& scores) {
  VPOD_CHECK_MSG(!runners_.empty(), "TensorParallelGroup::forward before attach_kv");
  return threads_->run_all([&](int r) -> Status {
    // Ranks >= 1 run the same step through their runners (the same logits
    // mode, the same prompt-scoring slices), so every collective meets its
    // peers; their logits are slices nobody reads.
    // Rank 0 runs on the engine's model thread, whose current device other
    // code may have switched (a rank's KV store binds its GPU to the thread
    // that grows it): make GPU 0 current for this step.
    if (r == 0 && device_ == Device::cuda && cudaSetDevice(0) != cudaSuccess) {
      comms_[0]->abort();
      return unavailable("cannot select CUDA device 0 for tensor-parallel rank 0");
    }
    Status s = r == 0 ? runners_[0]->forward(batch, samples, out, scores)
                      : runners_[r]->forward_logits(batch, scores);
    if (!s.ok()) comms_[r]->abort();
    return s;
  });
}

}  // namespace vpod::engine
