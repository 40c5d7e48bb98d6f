// The in-process communicator group (communicator.h): ranks are threads of
// one process, tensors are host memory. A collective publishes each rank's
// pointer, meets at a barrier, works directly on the other ranks' buffers,
// and meets again before anyone may touch its buffer.
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "common/dtype.h"
#include "model/communicator.h"

namespace vpod::model {

namespace {

// What the ranks share: a reusable barrier (generation counter) and one
// published tensor per rank.
struct LocalGroup {
  explicit LocalGroup(int n) : size(n), data(n, nullptr), numel(n, 0) {}

  // Returns false when the group was aborted (before or while waiting).
  bool arrive_and_wait() {
    std::unique_lock lock(mutex);
    if (aborted) return false;
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return true;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    return !aborted;
  }
  void abort() {
    std::lock_guard lock(mutex);
    aborted = true;
    cv.notify_all();
  }

  const int size;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  bool aborted = false;
  // Written by rank r before the first barrier of a collective, read by all
  // between the two barriers.
  std::vector<void*> data;
  std::vector<std::int64_t> numel;
};

Status aborted_status() {
  return internal_error("tensor-parallel group aborted: another rank failed");
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  std::string description() const override { return "in-process"; }

  Status all_reduce_sum(const TensorView& x) override {
    VPOD_CHECK_MSG(x.device() == Device::cpu && x.is_contiguous(),
                   "in-process all_reduce_sum needs a contiguous host tensor: " + x.to_string());
    const int n = group_->size;
    if (n == 1) return {};
    group_->data[rank_] = x.data();
    group_->numel[rank_] = x.numel();
    if (!group_->arrive_and_wait()) return aborted_status();
    for (int r = 0; r < n; ++r) VPOD_CHECK(group_->numel[r] == x.numel());
    // Rank r reduces the r-th chunk of elements for everyone, adding the
    // ranks' values in rank order: every rank ends with the same bits.
    const std::int64_t total = x.numel();
    const std::int64_t chunk = (total + n - 1) / n;
    const std::int64_t begin = std::min(total, chunk * rank_);
    const std::int64_t end = std::min(total, begin + chunk);
    const DType dt = x.dtype();
    if (dt == DType::f32) {
      for (std::int64_t i = begin; i < end; ++i) {
        float s = static_cast<const float*>(group_->data[0])[i];
        for (int r = 1; r < n; ++r) s += static_cast<const float*>(group_->data[r])[i];
        for (int r = 0; r < n; ++r) static_cast<float*>(group_->data[r])[i] = s;
      }
    } else {
      for (std::int64_t i = begin; i < end; ++i) {
        float s = load_as_float(group_->data[0], dt, i);
        for (int r = 1; r < n; ++r) s += load_as_float(group_->data[r], dt, i);
        for (int r = 0; r < n; ++r) store_from_float(group_->data[r], dt, i, s);
      }
    }
    if (!group_->arrive_and_wait()) return aborted_status();
    return {};
  }

  Status gather_columns(const TensorView& local, const TensorView& out) override {
    VPOD_CHECK_MSG(local.device() == Device::cpu && local.rank() == 2 && local.is_contiguous(),
                   "gather_columns: local must be a contiguous host [rows, cols] tensor: " +
                       local.to_string());
    const int n = group_->size;
    const std::int64_t rows = local.size(0);
    const std::int64_t cols = local.size(1);
    if (rank_ == 0) {
      VPOD_CHECK_MSG(out.rank() == 2 && out.size(0) == rows && out.size(1) == n * cols &&
                         out.is_contiguous() && out.dtype() == local.dtype(),
                     "gather_columns: out must be [rows, size * cols]: " + out.to_string());
    }
    group_->data[rank_] = local.data();
    group_->numel[rank_] = local.numel();
    if (!group_->arrive_and_wait()) return aborted_status();
    if (rank_ == 0) {
      const std::size_t elem = dtype_size(local.dtype());
      const std::size_t block = static_cast<std::size_t>(cols) * elem;
      auto* dst = static_cast<std::uint8_t*>(out.data());
      for (int r = 0; r < n; ++r) {
        VPOD_CHECK(group_->numel[r] == local.numel());
        const auto* src = static_cast<const std::uint8_t*>(group_->data[r]);
        for (std::int64_t i = 0; i < rows; ++i) {
          std::memcpy(dst + (i * n + r) * block, src + i * block, block);
        }
      }
    }
    if (!group_->arrive_and_wait()) return aborted_status();
    return {};
  }

  Status barrier() override {
    if (!group_->arrive_and_wait()) return aborted_status();
    return {};
  }

  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_communicators(int size) {
  VPOD_CHECK(size >= 1);
  auto group = std::make_shared<LocalGroup>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LocalCommunicator>(group, r));
  return out;
}

}  // namespace vpod::model
