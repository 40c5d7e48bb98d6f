// The tensors a model of a given config has, named and shaped exactly as
// Hugging Face transformers stores them. The loader checks a checkpoint
// against this list (every tensor present, none unexpected, shapes equal),
// and make-model writes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace vpod::model {

enum class WeightInit : std::uint8_t {
  normal_like,  // matrices: uniform with the config's initializer_range as std
  norm,         // RMSNorm gains: around 1
  bias,         // biases: small, around 0
};

struct WeightSpec {
  std::string name;  // "model.layers.3.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;
  WeightInit init = WeightInit::normal_like;
};

std::vector<WeightSpec> weight_layout(const ModelConfig& config);

// "model.layers.{layer}.{suffix}"
std::string layer_weight_name(int layer, const char* suffix);

}  // namespace vpod::model
