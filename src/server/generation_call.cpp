// GenerationCall (generation_call.h): submitting an HTTP request's sequences
// to the engine, draining their deltas, aborting them together.
#include "server/generation_call.h"

#include "common/splitmix64.h"

namespace vpod::server {
std::uint64_t choice_seed(std::uint64_t seed, int index) {
  if (index == 0) return seed;
  return splitmix64_finalize(seed + kSplitMix64Gamma * static_cast<std::uint64_t>(index));
}

ApiResult<std::unique_ptr<GenerationCall>> GenerationCall::start(
    ServingBackend& backend, std::vector<engine::RequestSpec> specs, std::function<void()> notify) {
  auto notifier = std::make_shared<Notifier>();
  notifier->notify = std::move(notify);
  std::unique_ptr<GenerationCall> call(new GenerationCall(notifier));
  call->sequences_.reserve(specs.size());
  for (engine::RequestSpec& spec : specs) {
    // The engine thread calls this; the Notifier outlives the call if needed.
    auto wake = [notifier] {
      std::lock_guard lock(notifier->mutex);
      if (notifier->notify) notifier->notify();
    };
    auto stream = backend.submit(std::move(spec), std::move(wake));
    if (!stream.ok()) return from_status(stream.status());  // ~GenerationCall aborts the rest
    call->sequences_.push_back({std::move(stream).value(), false});
  }
  return call;
}

GenerationCall::~GenerationCall() {
  {
    std::lock_guard lock(notifier_->mutex);
    notifier_->notify = nullptr;
  }
  for (Sequence& s : sequences_) {
    if (!s.finished) s.stream->abort();
  }
}

int GenerationCall::poll(const Sink& sink) {
  int handed = 0;
  for (int i = 0; i < size(); ++i) {
    Sequence& s = sequences_[i];
    if (s.finished || !s.stream->try_pop(scratch_)) continue;
    if (scratch_.finished) {
      s.finished = true;
      ++num_finished_;
    }
    sink(i, scratch_);
    ++handed;
  }
  return handed;
}

void GenerationCall::abort() {
  if (aborted_) return;
  aborted_ = true;
  for (Sequence& s : sequences_) {
    if (!s.finished) s.stream->abort();
  }
}

}  // namespace vpod::server
