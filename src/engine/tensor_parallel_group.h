// A tensor-parallel model: N ranks in one process, one thread each
// (rank_threads.h), each with its own backend (on CUDA: its GPU, stream,
// cuBLASLt), communicator, model shard and KV cache view. It is the engine's
// ModelExecutor: the engine runs on rank 0's side - one scheduler, one KV
// admission decision for all ranks (kvcache/replicated_kv_store.h) - and each
// step hands the same HybridBatch (shared memory, no broadcast) to every
// rank. Rank 0 samples from the logits gathered onto it.
//
//   auto group = TensorParallelGroup::create(options);   // backends, comms, shards
//   store = ReplicatedKvStore over one store per rank (group->threads() makes them)
//   group->attach_kv(*store);
//   engine over *group and *store
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/model_executor.h"
#include "engine/model_runner.h"
#include "engine/rank_threads.h"
#include "kvcache/replicated_kv_store.h"
#include "model/backend.h"
#include "model/communicator.h"
#include "model/model.h"

namespace vpod::engine {

struct TensorParallelGroupOptions {
  int size = 2;
  Device device = Device::cpu;  // cpu: in-process communicators; cuda: NCCL, GPU r for rank r
  std::filesystem::path model_dir;
  model::ModelOptions model;  // tensor_parallel is set per rank
  // Rank r's backend, called on rank r's thread (CUDA: device r is current).
  std::function<Result<std::unique_ptr<model::Backend>>(int rank)> make_backend;
};

class TensorParallelGroup final : public ModelExecutor {
 public:
  // Makes every rank's backend, then the communicators (every rank at once:
  // NCCL's init waits for the whole group), then loads each rank's shard.
  static Result<std::unique_ptr<TensorParallelGroup>> create(
      const TensorParallelGroupOptions& options);
  // Tears each rank down on its own thread (its device current).
  ~TensorParallelGroup() override;
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

  int size() const { return static_cast<int>(models_.size()); }
  model::Model& model(int rank) const { return *models_.at(rank); }
  RankThreads& threads() { return *threads_; }
  const model::Communicator& communicator(int rank) const { return *comms_.at(rank); }

  // Each rank reads its own store's view; rank 0's runner samples. Call once,
  // before the first forward; `store` outlives the group's use.
  void attach_kv(const kvcache::ReplicatedKvStore& store);
  void set_logits_observer(LogitsObserver observer);

  // Every rank runs the step at once; rank 0 then samples. A failure on any
  // rank aborts the group (later steps fail too) and fails the step.
  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out, const PromptScores& scores) override;

 private:
  TensorParallelGroup() = default;

  Device device_ = Device::cpu;

  // Declared in construction order; the destructor releases them per rank.
  std::unique_ptr<RankThreads> threads_;
  std::vector<std::unique_ptr<model::Backend>> backends_;
  std::vector<std::unique_ptr<model::Communicator>> comms_;
  std::vector<std::unique_ptr<model::Model>> models_;
  std::vector<KvCacheView> kv_;
  // One per rank over its model and KV view; rank 0's samples.
  std::vector<std::unique_ptr<ModelRunner>> runners_;
};

}  // namespace vpod::engine
