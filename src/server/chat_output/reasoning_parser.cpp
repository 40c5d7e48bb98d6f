// ThinkParser (reasoning_parser.h): Qwen3's <think> block as a small state
// machine over the text, holding back only a partial tag.
#include "server/chat_output/reasoning_parser.h"

#include <utility>

#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

}  // namespace

void ThinkParser::feed(std::string_view text, std::string& reasoning, std::string& content) {
  if (state_ == State::answer) {
    content += text;
    return;
  }
  pending_ += text;
  if (state_ == State::start) {
    const std::size_t first = pending_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return;
    std::string_view rest = std::string_view(pending_).substr(first);
    if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
      pending_.erase(0, first + kThinkOpen.size());
      state_ = State::thinking;
    } else if (rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest) {
      return;
    } else {
      state_ = State::answer;
      content += std::exchange(pending_, {});
      return;
    }
  }
  // Thinking: up to </think> is reasoning, the rest is the answer.
  const std::size_t close = pending_.find(kThinkClose);
  if (close == std::string::npos) {
    const std::size_t keep = partial_tag_length(pending_, kThinkClose);
    reasoning.append(pending_, 0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return;
  }
  reasoning.append(pending_, 0, close);
  content.append(pending_, close + kThinkClose.size());
  pending_.clear();
  state_ = State::answer;
}

void ThinkParser::finish(std::string& reasoning, std::string& content) {
  if (state_ == State::thinking) {
    reasoning += std::exchange(pending_, {});
  } else {
    content += std::exchange(pending_, {});
  }
}

}  // namespace vpod::server::chat_output
