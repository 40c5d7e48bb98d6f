// Where Model::load_weights takes a model's tensors from: a checkpoint's
// mapped safetensors, or (vLLM's --load-format dummy) make-model's random
// values generated on the fly, so a model folder needs only its config.json
// (and tokenizer) to serve. The dummy values are make-model's for the same
// seed (model/make_model.h), so a dummy-loaded model equals the model
// `vpod make-model --seed S` writes, bit for bit; any tensor-parallel shard
// generates just its slice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_layout.h"

namespace vpod::model {

enum class LoadFormat : std::uint8_t {
  safetensors,  // the folder's model.safetensors (or its shards); vLLM's "auto"
  dummy,        // random weights made in memory (make-model's, for a seed)
};
// "auto" and "safetensors" -> safetensors, "dummy" -> dummy (vLLM's names).
Result<LoadFormat> parse_load_format(std::string_view text);
std::string_view load_format_name(LoadFormat format);

class WeightSource {
 public:
  // Over a checkpoint (which must outlive the source), validated elsewhere.
  static WeightSource checkpoint(const Checkpoint& ckpt);
  // make-model's weights of `config` for `seed`, in config.dtype.
  static WeightSource random(const ModelConfig& config, std::uint64_t seed);

  // The tensor's dtype and shape; null when the source has no such tensor.
  DType dtype(const std::string& name) const;
  const std::vector<std::int64_t>& shape(const std::string& name) const;

  // Elements [first, first + count) of tensor `name` (row-major) as host
  // bytes in dtype(name): a pointer into the mapped file, or `scratch`
  // filled with the generated values (on a few threads when large).
  const std::uint8_t* read(const std::string& name, std::int64_t first, std::int64_t count,
                           std::vector<std::uint8_t>& scratch) const;

 private:
  struct Generated {
    std::vector<std::int64_t> shape;
    WeightInit init = WeightInit::normal_like;
    std::uint64_t key = 0;
  };
  const Checkpoint* ckpt_ = nullptr;            // checkpoint source
  std::map<std::string, Generated> generated_;  // random source
  DType generated_dtype_ = DType::f32;
  float initializer_range_ = 0.02f;
};

}  // namespace vpod::model
