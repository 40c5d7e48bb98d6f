// Reasoning parsers (--reasoning-parser): split a model's thinking from its
// answer as it streams. Qwen3 writes "<think>\n...\n</think>\n\nanswer"; with
// thinking off (enable_thinking: false) its template closes the think block
// in the prompt, so the output has no tags and is all answer.
#pragma once

#include <string>
#include <string_view>

#include "server/chat_output/parser_kinds.h"

namespace vpod::server::chat_output {

// Qwen3's <think>...</think>. Output that does not open with <think> (after
// whitespace) is content; an unclosed think block (the length ran out) stays
// reasoning.
class ThinkParser {
 public:
  // Appends the reasoning and the content this piece settles.
  void feed(std::string_view text, std::string& reasoning, std::string& content);
  void finish(std::string& reasoning, std::string& content);

 private:
  enum class State { start, thinking, answer };

  State state_ = State::start;
  std::string pending_;  // undecided start, or a partial </think>
};

}  // namespace vpod::server::chat_output
