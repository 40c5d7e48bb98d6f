// Post-processors: what encode adds around the model's ids when asked to add
// special tokens. TemplateProcessing (BOS/EOS and the like) changes ids;
// ByteLevel only trims offsets in tokenizers, so it leaves ids as they are.
#pragma once

#include <memory>
#include <vector>

#include "tokenizer/bpe_model.h"

namespace vpod::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Called only when special tokens are requested.
  virtual void add_special_tokens(std::vector<TokenId>& ids) const = 0;
};

class ByteLevelPostProcessor final : public PostProcessor {
 public:
  void add_special_tokens(std::vector<TokenId>&) const override {}
};

// The "single" template: a list of items, each either the sequence or the ids
// of a special token.
class TemplatePostProcessor final : public PostProcessor {
 public:
  struct Item {
    bool is_sequence = false;
    std::vector<TokenId> ids;  // the special token's ids when !is_sequence
  };
  explicit TemplatePostProcessor(std::vector<Item> single) : single_(std::move(single)) {}
  void add_special_tokens(std::vector<TokenId>& ids) const override;

 private:
  std::vector<Item> single_;
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void add_special_tokens(std::vector<TokenId>& ids) const override {
    for (const auto& step : steps_) step->add_special_tokens(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

}  // namespace vpod::tokenizer
