// Mistral tool calls (vLLM's mistral): text, then [TOOL_CALLS] and a JSON
// array of calls (older tokenizers), or each call as a name and its
// arguments (tokenizer v11 and later):
//   [TOOL_CALLS] [{"name": "f", "arguments": {...}}, {...}]
//   [TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}
// (a single object without the array is accepted too). [TOOL_CALLS] and
// [ARGS] are special tokens: they are in the text only when special tokens
// are not skipped.
#include <utility>

#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
// A v11 function name longer than this is no name.
constexpr std::size_t kMaxNameLength = 256;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

class MistralParser final : public ToolCallParser {
 public:
  void feed(std::string_view text, ParsedText& out) override {
    pending_ += text;
    while (step(out)) {
    }
  }

  void finish(ParsedText& out) override {
    if (state_ == State::name || state_ == State::args) {
      malformed_ = true;  // unfinished
      if (state_ == State::name) out.content += raw_;
    } else if (state_ == State::calls) {
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
  enum class State { text, open, calls, name, args };

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
        if (is_name_char(pending_[first])) {
          pending_.erase(0, first);
          state_ = State::name;
          return true;
        }
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
      case State::name: {
        // v11: the name up to [ARGS].
        std::size_t end = 0;
        while (end < pending_.size() && is_name_char(pending_[end])) ++end;
        const std::string_view rest = std::string_view(pending_).substr(end);
        if (end > kMaxNameLength ||
            (rest.substr(0, kArgs.size()) != kArgs && kArgs.substr(0, rest.size()) != rest)) {
          malformed_ = true;  // no name: content
          out.content += std::exchange(raw_, {});
          state_ = State::text;
          return true;
        }
        if (rest.size() < kArgs.size()) return false;
        out.calls.push_back({base_, pending_.substr(0, end), {}});
        pending_.erase(0, end + kArgs.size());
        raw_.clear();
        depth_ = 0;
        in_string_ = escape_ = false;
        state_ = State::args;
        return true;
      }
      case State::args: return scan_arguments(out);
    }
    return false;
  }

  // v11: the arguments, one JSON value, go out as they arrive.
  bool scan_arguments(ParsedText& out) {
    std::size_t i = 0;
    bool done = false;
    for (; i < pending_.size() && !done; ++i) {
      const char c = pending_[i];
      if (in_string_) {
        if (escape_) {
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if (c == '}' || c == ']') {
        done = --depth_ <= 0;
      } else if (depth_ == 0 && c != ' ' && c != '\n') {
        done = true;  // not an object: the JSON check of the arguments tells
        malformed_ = true;
      }
    }
    if (i > 0) append_events(out.calls, {{base_, std::nullopt, pending_.substr(0, i)}}, 0);
    pending_.erase(0, i);
    if (!done) return false;
    ++base_;
    state_ = State::text;
    return true;
  }

  State state_ = State::text;
  std::string pending_;
  std::string raw_;  // [TOOL_CALLS] and the text before the first name, for content
  CallListScanner calls_{CallListScanner::Mode::array};
  int base_ = 0;
  bool malformed_ = false;
  int depth_ = 0;  // v11 arguments: nesting, strings
  bool in_string_ = false;
  bool escape_ = false;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_mistral_parser() { return std::make_unique<MistralParser>(); }

}  // namespace vpod::server::chat_output
