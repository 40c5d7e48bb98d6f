// Llama 3.x JSON tool calls (vLLM's llama3_json): the output starts with a
// call object, or with <|python_tag|> and one, and may hold several separated
// by ';':
//   {"name": "f", "parameters": {...}}; {"name": "g", "parameters": {...}}
// Output that starts otherwise is content, as in vLLM; so is output whose
// first object is no call. <|python_tag|> is a special token: it is in the
// text only when special tokens are not skipped.
#include <utility>

#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonParser final : public ToolCallParser {
 public:
  void feed(std::string_view text, ParsedText& out) override {
    if (state_ == State::text) {
      out.content += text;
      return;
    }
    pending_ += text;
    if (state_ == State::start && !decide()) return;
    if (state_ == State::text) {
      out.content += std::exchange(pending_, {});
      return;
    }
    scan(out);
  }

  void finish(ParsedText& out) override {
    if (state_ == State::calls) {
      calls_.finish();
      if (calls_.state() != CallListScanner::State::done) {
        malformed_ = true;
        if (calls_.num_announced() == 0) out.content += std::exchange(raw_, {});
      }
    }
    out.content += std::exchange(pending_, {});
  }

  bool malformed() const override { return malformed_; }

 private:
  enum class State { start, calls, text };

  // Whether the start of the output shows calls or content yet.
  bool decide() {
    const std::size_t first = pending_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return false;
    std::string_view rest = std::string_view(pending_).substr(first);
    if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
      raw_.assign(pending_, 0, first + kPythonTag.size());
      pending_.erase(0, first + kPythonTag.size());
      state_ = State::calls;
    } else if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest) {
      return false;
    } else {
      state_ = rest.front() == '{' ? State::calls : State::text;
    }
    return true;
  }

  void scan(ParsedText& out) {
    std::vector<CallEvent> events;
    const std::size_t used = calls_.feed(pending_, events);
    if (calls_.num_announced() == 0) raw_.append(pending_, 0, used);
    pending_.erase(0, used);
    append_events(out.calls, std::move(events), 0);
    if (calls_.state() == CallListScanner::State::running) return;
    if (calls_.state() == CallListScanner::State::failed) {
      malformed_ = true;
      if (calls_.num_announced() == 0) out.content += std::exchange(raw_, {});
    }
    // What follows the calls (or what was no call) is content.
    state_ = State::text;
    out.content += std::exchange(pending_, {});
  }

  State state_ = State::start;
  std::string pending_;
  std::string raw_;  // the text before the first call's name, for content if it is no call
  CallListScanner calls_{CallListScanner::Mode::bare};
  bool malformed_ = false;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_llama3_json_parser() {
  return std::make_unique<Llama3JsonParser>();
}

}  // namespace vpod::server::chat_output
