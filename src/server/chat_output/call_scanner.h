// Incremental scanning of tool calls written as JSON by a model: one call
// object {"name": "f", "arguments": {...}} ("parameters" is accepted for
// "arguments", as Llama 3 writes it), and lists of them (a JSON array, or
// bare objects separated by ';' / whitespace). Text is fed as it arrives;
// each byte is looked at once, so a stream costs O(its length).
//
// The scanner checks the call's shape (keys, strings, bracket nesting), not
// every JSON rule inside the arguments: non-streamed output is parsed again
// by nlohmann (ToolCallParser::malformed) before it is trusted.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vpod::server::chat_output {

// One call object, from its '{' to its '}'.
class CallObjectScanner {
 public:
  enum class State { running, done, failed };

  // Consumes bytes of `text` until the object closes (done), the text ends
  // (running), or the text cannot be a call object (failed). Returns the
  // bytes consumed: all of them while running, up to the closing brace when
  // done, up to the offending byte when failed.
  std::size_t feed(std::string_view text);

  State state() const { return state_; }
  // The decoded "name", once its string has closed.
  const std::optional<std::string>& name() const { return name_; }
  // The arguments' JSON text produced since the last call (raw, as the model
  // wrote it; a string-valued "arguments" is decoded once it closes). Empty
  // until the name is known, so a call's name always goes out first.
  std::string take_arguments();
  // Whether an "arguments"/"parameters" value was seen (a call without one
  // has arguments "{}").
  bool has_arguments() const { return args_seen_; }

 private:
  enum class Top { open, key, in_key, colon, value, in_value, after_value };
  enum class Field { other, name, arguments };

  void begin_value(char c);
  void end_value();
  void value_byte(char c);
  void fail() { state_ = State::failed; }

  State state_ = State::running;
  Top top_ = Top::open;
  Field field_ = Field::other;
  int depth_ = 0;  // nesting inside the current value
  bool in_string_ = false;
  bool escape_ = false;
  bool scalar_ = false;        // the current value is a number / true / false / null
  bool string_value_ = false;  // the current value is a string
  std::string key_;            // raw key text between its quotes
  std::string value_;          // raw text of a name or string-valued arguments
  std::optional<std::string> name_;
  bool args_seen_ = false;
  std::string args_pending_;  // argument text not yet taken
};

// Events of a list of calls: which call, its name (first event of a call
// only) and argument text.
struct CallEvent {
  int index = 0;
  std::optional<std::string> name;  // set on the call's first event
  std::string arguments;
};

// A list of call objects: a JSON array `[{...}, {...}]` (Mistral's
// [TOOL_CALLS], a required tool_choice's output) or bare objects separated by
// ';' or whitespace (Llama 3's JSON tool calls).
class CallListScanner {
 public:
  enum class Mode { array, bare };
  enum class State { running, done, failed };

  explicit CallListScanner(Mode mode) : mode_(mode) {}

  // Consumes text, appending events to `out`. Returns the bytes consumed
  // (less than text.size() only once done or failed: the rest follows the list).
  std::size_t feed(std::string_view text, std::vector<CallEvent>& out);
  // The text has ended: a bare list whose last object closed is done.
  void finish();

  State state() const { return state_; }
  // Calls whose name went out.
  int num_announced() const { return num_announced_; }
  // A call object is open (started, not closed).
  bool in_call() const { return in_call_; }

 private:
  void drain(std::vector<CallEvent>& out);

  Mode mode_;
  State state_ = State::running;
  bool opened_ = false;      // array: '[' seen
  bool after_call_ = false;  // a call closed, a separator or the end may follow
  bool in_call_ = false;
  CallObjectScanner call_;
  int index_ = -1;
  int num_announced_ = 0;
  bool announced_ = false;  // the current call's name went out
};

}  // namespace vpod::server::chat_output
