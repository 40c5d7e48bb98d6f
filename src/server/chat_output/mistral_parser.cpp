// Mistral tool calls (vLLM's mistral): text, then [TOOL_CALLS] and a JSON
// array of calls:
//   [TOOL_CALLS] [{"name": "f", "arguments": {...}}, {...}]
// (a single object without the array is accepted too). [TOOL_CALLS] is a
// special token: it is in the text only when special tokens are not skipped.
#include <utility>

#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";

class MistralParser final : public ToolCallParser {
 public:
  void feed(std::string_view text, ParsedText& out) override {
    pending_ += text;
    while (step(out)) {
    }
  }

  void finish(ParsedText& out) override {
    if (state_ == State::calls) {
      calls_.finish();
      if (calls_.state() != CallListScanner::State::done) {
        malformed_ = true;
        if (calls_.num_announced() == 0) out.content += raw_;
      }
    } else if (state_ == State::open) {
      out.content += raw_;  // a bare [TOOL_CALLS] and no calls
    }
    out.content += std::exchange(pending_, {});
  }

  bool malformed() const override { return malformed_; }

 private:
  enum class State { text, open, calls };

  bool step(ParsedText& out) {
    switch (state_) {
      case State::text: {
        const std::size_t tag = pending_.find(kToolCalls);
        if (tag == std::string::npos) {
          const std::size_t keep = partial_tag_length(pending_, kToolCalls);
          out.content.append(pending_, 0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return false;
        }
        out.content.append(pending_, 0, tag);
        pending_.erase(0, tag + kToolCalls.size());
        raw_ = kToolCalls;
        state_ = State::open;
        return true;
      }
      case State::open: {
        const std::size_t first = pending_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return false;
        if (pending_[first] != '[' && pending_[first] != '{') {
          malformed_ = true;
          out.content += std::exchange(raw_, {});
          state_ = State::text;
          return true;
        }
        calls_ = CallListScanner(pending_[first] == '[' ? CallListScanner::Mode::array
                                                        : CallListScanner::Mode::bare);
        state_ = State::calls;
        return true;
      }
      case State::calls: {
        std::vector<CallEvent> events;
        const std::size_t used = calls_.feed(pending_, events);
        if (calls_.num_announced() == 0) raw_.append(pending_, 0, used);
        pending_.erase(0, used);
        append_events(out.calls, std::move(events), base_);
        if (calls_.state() == CallListScanner::State::running) return false;
        if (calls_.state() == CallListScanner::State::failed) {
          malformed_ = true;
          if (calls_.num_announced() == 0) out.content += raw_;
        }
        base_ += calls_.num_announced();
        raw_.clear();
        state_ = State::text;
        return true;
      }
    }
    return false;
  }

  State state_ = State::text;
  std::string pending_;
  std::string raw_;  // [TOOL_CALLS] and the text before the first name, for content
  CallListScanner calls_{CallListScanner::Mode::array};
  int base_ = 0;
  bool malformed_ = false;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_mistral_parser() { return std::make_unique<MistralParser>(); }

}  // namespace vpod::server::chat_output
