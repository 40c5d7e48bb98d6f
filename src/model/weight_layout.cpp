// The tensor list of a model config (weight_layout.h): every tensor's Hugging
// Face name, shape and initialization kind, from the config's
// sizes and options.

#include "model/weight_layout.h"

namespace vpod::model {

std::string layer_weight_name(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::vector<WeightSpec> weight_layout(const ModelConfig& c) {
  const std::int64_t h = c.hidden_size;
  const std::int64_t q = c.q_size();
  const std::int64_t kv = c.kv_size();
  const std::int64_t inter = c.intermediate_size;
  std::vector<WeightSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, WeightInit::normal_like});
  for (int l = 0; l < c.num_layers; ++l) {
    auto add = [&](const char* suffix, std::vector<std::int64_t> shape, WeightInit init) {
      specs.push_back({layer_weight_name(l, suffix), std::move(shape), init});
    };
    add("input_layernorm.weight", {h}, WeightInit::norm);
    add("self_attn.q_proj.weight", {q, h}, WeightInit::normal_like);
    add("self_attn.k_proj.weight", {kv, h}, WeightInit::normal_like);
    add("self_attn.v_proj.weight", {kv, h}, WeightInit::normal_like);
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q}, WeightInit::bias);
      add("self_attn.k_proj.bias", {kv}, WeightInit::bias);
      add("self_attn.v_proj.bias", {kv}, WeightInit::bias);
    }
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", {c.head_dim}, WeightInit::norm);
      add("self_attn.k_norm.weight", {c.head_dim}, WeightInit::norm);
    }
    add("self_attn.o_proj.weight", {h, q}, WeightInit::normal_like);
    if (c.o_bias) add("self_attn.o_proj.bias", {h}, WeightInit::bias);
    add("post_attention_layernorm.weight", {h}, WeightInit::norm);
    add("mlp.gate_proj.weight", {inter, h}, WeightInit::normal_like);
    add("mlp.up_proj.weight", {inter, h}, WeightInit::normal_like);
    add("mlp.down_proj.weight", {h, inter}, WeightInit::normal_like);
  }
  specs.push_back({"model.norm.weight", {h}, WeightInit::norm});
  if (!c.tie_word_embeddings) {
    specs.push_back({"lm_head.weight", {c.vocab_size, h}, WeightInit::normal_like});
  }
  return specs;
}

}  // namespace vpod::model
