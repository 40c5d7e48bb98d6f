// The post-processors (post_processor.h): TemplateProcessing's special tokens.

#include "tokenizer/post_processor.h"

namespace vpod::tokenizer {

void TemplatePostProcessor::add_special_tokens(std::vector<TokenId>& ids) const {
  std::vector<TokenId> out;
  out.reserve(ids.size() + 4);
  for (const Item& item : single_) {
    if (item.is_sequence) {
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
  }
  ids = std::move(out);
}

}  // namespace vpod::tokenizer
