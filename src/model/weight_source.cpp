// WeightSource (weight_source.h).
#include "model/weight_source.h"

#include <algorithm>
#include <thread>

#include "common/check.h"
#include "model/make_model.h"

namespace vpod::model {

Result<LoadFormat> parse_load_format(std::string_view text) {
  if (text == "auto" || text == "safetensors") return LoadFormat::safetensors;
  if (text == "dummy") return LoadFormat::dummy;
  return invalid_argument("must be auto, safetensors or dummy, got '" + std::string(text) + "'");
}

std::string_view load_format_name(LoadFormat format) {
  return format == LoadFormat::dummy ? "dummy" : "safetensors";
}

WeightSource WeightSource::checkpoint(const Checkpoint& ckpt) {
  WeightSource s;
  s.ckpt_ = &ckpt;
  return s;
}

WeightSource WeightSource::random(const ModelConfig& config, std::uint64_t seed) {
  WeightSource s;
  s.generated_dtype_ = config.dtype;
  s.initializer_range_ = config.initializer_range;
  for (const WeightSpec& spec : weight_layout(config)) {
    s.generated_[spec.name] = {spec.shape, spec.init, random_weight_key(seed, spec.name)};
  }
  return s;
}

DType WeightSource::dtype(const std::string& name) const {
  if (ckpt_ != nullptr) {
    const WeightTensor* t = ckpt_->find(name);
    VPOD_CHECK_MSG(t != nullptr, "the loader asked for a tensor the checkpoint lacks");
    return t->dtype;
  }
  VPOD_CHECK(generated_.count(name) != 0);
  return generated_dtype_;
}

const std::vector<std::int64_t>& WeightSource::shape(const std::string& name) const {
  if (ckpt_ != nullptr) {
    const WeightTensor* t = ckpt_->find(name);
    VPOD_CHECK_MSG(t != nullptr, "the loader asked for a tensor the checkpoint lacks");
    return t->shape;
  }
  auto it = generated_.find(name);
  VPOD_CHECK(it != generated_.end());
  return it->second.shape;
}

const std::uint8_t* WeightSource::read(const std::string& name, std::int64_t first,
                                       std::int64_t count,
                                       std::vector<std::uint8_t>& scratch) const {
  const std::size_t elem = dtype_size(dtype(name));
  if (ckpt_ != nullptr) {
    const WeightTensor* t = ckpt_->find(name);
    VPOD_CHECK(static_cast<std::size_t>(first + count) * elem <= t->nbytes);
    return static_cast<const std::uint8_t*>(t->data) + static_cast<std::size_t>(first) * elem;
  }
  const Generated& g = generated_.at(name);
  scratch.resize(static_cast<std::size_t>(count) * elem);
  // make-model's values are a pure function of the index: split a large
  // read over a few threads (load time only; nothing is shared).
  constexpr std::int64_t kPerThread = std::int64_t{1} << 22;
  const int threads = static_cast<int>(std::clamp<std::int64_t>(
      count / kPerThread, 1, std::max(1u, std::thread::hardware_concurrency())));
  auto fill = [&](std::int64_t begin, std::int64_t n) {
    fill_random_weights(g.key, g.init, initializer_range_, generated_dtype_, first + begin, n,
                        scratch.data() + static_cast<std::size_t>(begin) * elem);
  };
  if (threads == 1) {
    fill(0, count);
  } else {
    std::vector<std::thread> pool;
    const std::int64_t step = (count + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const std::int64_t begin = t * step;
      const std::int64_t n = std::min(step, count - begin);
      if (n > 0) pool.emplace_back(fill, begin, n);
    }
    for (std::thread& th : pool) th.join();
  }
  return scratch.data();
}

}  // namespace vpod::model
