// Hermes-style tool calls, as Hermes 2/3, Qwen2.5 and Qwen3 write them:
//   text <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>\n<tool_call>...
// Text outside the tags is content. A missing closing tag at the end is
// accepted (vLLM's parser accepts it too).
#include <utility>

#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

class HermesParser final : public ToolCallParser {
 public:
  void feed(std::string_view text, ParsedText& out) override {
    pending_ += text;
    while (step(out)) {
    }
  }

  void finish(ParsedText& out) override {
    if (state_ == State::text) {
      out.content += pending_;
    } else if (state_ == State::call) {
      calls_.finish();
      if (calls_.state() != CallListScanner::State::done) {
        malformed_ = true;
        if (calls_.num_announced() == 0) out.content += std::string(kOpen) + raw_ + pending_;
      }
    }
    pending_.clear();
  }

  bool malformed() const override { return malformed_; }

 private:
  enum class State { text, call, after_call };

  // One step over pending_; false when it needs more text.
  bool step(ParsedText& out) {
    switch (state_) {
      case State::text: {
        const std::size_t open = pending_.find(kOpen);
        if (open == std::string::npos) {
          const std::size_t keep = partial_tag_length(pending_, kOpen);
          out.content.append(pending_, 0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return false;
        }
        out.content.append(pending_, 0, open);
        pending_.erase(0, open + kOpen.size());
        state_ = State::call;
        calls_ = CallListScanner(CallListScanner::Mode::bare);
        raw_.clear();
        return true;
      }
      case State::call: {
        std::vector<CallEvent> events;
        const std::size_t used = calls_.feed(pending_, events);
        raw_.append(pending_, 0, used);
        pending_.erase(0, used);
        append_events(out.calls, std::move(events), base_);
        switch (calls_.state()) {
          case CallListScanner::State::running: return false;
          case CallListScanner::State::done:
            base_ += calls_.num_announced();
            state_ = State::after_call;
            return true;
          case CallListScanner::State::failed:
            // Not a call after all: what the tag held is content.
            malformed_ = true;
            if (calls_.num_announced() == 0) out.content += std::string(kOpen) + raw_;
            base_ += calls_.num_announced();
            state_ = State::text;
            return true;
        }
        return false;
      }
      case State::after_call: {
        std::size_t start = pending_.find_first_not_of(" \t\r\n");
        if (start == std::string::npos) return false;
        std::string_view rest = std::string_view(pending_).substr(start);
        if (rest.substr(0, kClose.size()) == kClose) {
          pending_.erase(0, start + kClose.size());
        } else if (rest.size() < kClose.size() && kClose.substr(0, rest.size()) == rest) {
          return false;  // a partial closing tag
        }
        state_ = State::text;  // no closing tag: what follows is text
        return true;
      }
    }
    return false;
  }

  State state_ = State::text;
  std::string pending_;  // text not yet settled
  CallListScanner calls_{CallListScanner::Mode::bare};
  std::string raw_;  // the current tag's text, for content if it is no call
  int base_ = 0;     // calls in earlier tags
  bool malformed_ = false;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_hermes_parser() { return std::make_unique<HermesParser>(); }

}  // namespace vpod::server::chat_output
