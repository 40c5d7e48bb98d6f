// The outputs of a required or named tool_choice, which the grammar holds to
// a JSON shape (tool_request.h builds the schemas, as vLLM does):
//   required: [{"name": "f", "parameters": {...}}, ...]  (one or more calls)
//   named:    {...}                                      (the function's arguments)
#include <utility>

#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {
namespace {

class RequiredParser final : public ToolCallParser {
 public:
  void feed(std::string_view text, ParsedText& out) override {
    if (calls_.state() != CallListScanner::State::running) {
      rest_ += text;
      return;
    }
    std::vector<CallEvent> events;
    const std::size_t used = calls_.feed(text, events);
    append_events(out.calls, std::move(events), 0);
    rest_.append(text.substr(used));
  }

  void finish(ParsedText& out) override {
    calls_.finish();
    // Past the closing bracket only whitespace may follow.
    if (calls_.state() != CallListScanner::State::done ||
        rest_.find_first_not_of(" \t\r\n") != std::string::npos || calls_.num_announced() == 0) {
      malformed_ = true;
    }
    if (calls_.state() == CallListScanner::State::failed) out.content += rest_;
  }

  bool malformed() const override { return malformed_; }

 private:
  CallListScanner calls_{CallListScanner::Mode::array};
  std::string rest_;  // text the list did not take
  bool malformed_ = false;
};

class NamedParser final : public ToolCallParser {
 public:
  explicit NamedParser(std::string name) : name_(std::move(name)) {}

  void feed(std::string_view text, ParsedText& out) override {
    if (text.empty()) return;
    CallEvent e;
    if (!announced_) e.name = name_;
    announced_ = true;
    e.arguments = text;
    append_events(out.calls, {std::move(e)}, 0);
  }

  void finish(ParsedText&) override {}

  // Nothing generated is no call. The arguments' JSON is checked by the
  // caller, like every call's.
  bool malformed() const override { return !announced_; }

 private:
  std::string name_;
  bool announced_ = false;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_required_parser() {
  return std::make_unique<RequiredParser>();
}

std::unique_ptr<ToolCallParser> make_named_parser(std::string function_name) {
  return std::make_unique<NamedParser>(std::move(function_name));
}

}  // namespace vpod::server::chat_output
