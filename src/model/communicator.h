// The collectives tensor parallelism needs (docs/model.md, "Tensor
// parallelism"): one Communicator per rank of a group of `size` ranks, each
// used by its rank's thread only. Two implementations:
//   - the in-process group (make_local_communicators): CPU threads of one
//     process over shared host buffers and a barrier; the reduction adds the
//     ranks' values in rank order, so every rank gets the same bits and a run
//     is reproducible;
//   - NCCL (nccl_communicator.h): one rank per GPU, the collectives enqueued
//     on the rank's backend stream (so CUDA graphs capture them).
// Every rank must call the same collectives in the same order with the same
// shapes (the model's forward does: every rank runs the same step).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor_view.h"

namespace vpod::model {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A name for logs ("in-process", "nccl 2.28.9").
  virtual std::string description() const = 0;

  // x = the sum of every rank's x, in place. x: a contiguous tensor in the
  // rank's backend memory, of the backend's compute dtype (fp32 on the CPU).
  virtual Status all_reduce_sum(const TensorView& x) = 0;
  // Rank 0 receives every rank's `local` [rows, cols] (contiguous) as the
  // column block [r * cols, (r + 1) * cols) of `out` [rows, size * cols]
  // (contiguous); the other ranks' `out` is not touched (pass an empty view).
  // The logits of the vocab-parallel LM head reach the sampler this way.
  virtual Status gather_columns(const TensorView& local, const TensorView& out) = 0;
  // Returns once every rank has called it.
  virtual Status barrier() = 0;
  // Sizes what gather_columns needs for up to `bytes` of `local` per rank
  // (start-up; nothing is allocated on the step path). Default: nothing.
  virtual Status reserve_gather(std::size_t bytes) {
    (void)bytes;
    return {};
  }
  // Ends the group after a rank failed mid-step: collectives waiting on any
  // rank (and every later one) return an error instead of waiting forever.
  virtual void abort() = 0;
};

// An in-process group of `size` ranks (host memory, fp32/fp16/bf16).
// Communicator r is rank r; the group lives as long as any of them.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(int size);

}  // namespace vpod::model
