// CallObjectScanner and CallListScanner (call_scanner.h): a byte-at-a-time
// state machine over the top level of a call object; values are copied out
// (name, arguments) or skipped while their nesting is tracked.
#include "server/chat_output/call_scanner.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace vpod::server::chat_output {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

bool starts_scalar(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == 't' || c == 'f' || c == 'n';
}

// A JSON string literal's value ("\"a\\nb\"" -> "a\nb"), or nothing.
std::optional<std::string> decode_string(const std::string& literal) {
  nlohmann::json v = nlohmann::json::parse(literal, nullptr, /*allow_exceptions=*/false);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

}  // namespace

std::string CallObjectScanner::take_arguments() {
  if (!name_) return {};
  return std::exchange(args_pending_, {});
}

void CallObjectScanner::begin_value(char c) {
  string_value_ = c == '"';
  scalar_ = false;
  depth_ = 0;
  if (field_ == Field::name && !string_value_) return fail();
  if (c == '{' || c == '[') {
    depth_ = 1;
  } else if (string_value_) {
    in_string_ = true;
  } else if (starts_scalar(c)) {
    scalar_ = true;
  } else {
    return fail();
  }
  top_ = Top::in_value;
  if (field_ == Field::name || (field_ == Field::arguments && string_value_)) {
    value_ = c;
  } else if (field_ == Field::arguments) {
    args_pending_ += c;
  }
}

void CallObjectScanner::end_value() {
  if (field_ == Field::name) {
    auto name = decode_string(value_);
    if (!name || name->empty()) return fail();
    if (!name_) name_ = std::move(name);
  } else if (field_ == Field::arguments) {
    args_seen_ = true;
    if (string_value_) {
      // "arguments": "{\"city\": \"Paris\"}" - the JSON text inside the string.
      auto text = decode_string(value_);
      if (!text) return fail();
      args_pending_ += *text;
    }
  }
  value_.clear();
  top_ = Top::after_value;
}

// One byte inside a value (never the scalar's terminator).
void CallObjectScanner::value_byte(char c) {
  if (field_ == Field::name || (field_ == Field::arguments && string_value_)) {
    value_ += c;
  } else if (field_ == Field::arguments) {
    args_pending_ += c;
  }
  if (in_string_) {
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      if (depth_ == 0) end_value();
    }
    return;
  }
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    if (--depth_ == 0) end_value();
  }
}

std::size_t CallObjectScanner::feed(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && state_ == State::running) {
    const char c = text[i];
    switch (top_) {
      case Top::open:
        if (c == '{') {
          top_ = Top::key;
        } else if (!is_space(c)) {
          fail();
          return i;
        }
        break;
      case Top::key:
        if (c == '"') {
          key_.clear();
          top_ = Top::in_key;
        } else if (c == '}') {
          state_ = name_ ? State::done : State::failed;
          return i + 1;
        } else if (!is_space(c)) {
          fail();
          return i;
        }
        break;
      case Top::in_key:
        if (escape_) {
          escape_ = false;
          key_ += c;
        } else if (c == '\\') {
          escape_ = true;
          key_ += c;
        } else if (c == '"') {
          top_ = Top::colon;
        } else {
          key_ += c;
        }
        break;
      case Top::colon:
        if (c == ':') {
          top_ = Top::value;
          if (key_ == "name") {
            field_ = name_ ? Field::other : Field::name;
          } else if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
            field_ = Field::arguments;
          } else {
            field_ = Field::other;
          }
        } else if (!is_space(c)) {
          fail();
          return i;
        }
        break;
      case Top::value:
        if (!is_space(c)) {
          begin_value(c);
          if (state_ != State::running) return i;
        }
        break;
      case Top::in_value:
        if (scalar_ && (c == ',' || c == '}' || is_space(c))) {
          end_value();
          continue;  // the terminator belongs to the object: look at it again
        }
        value_byte(c);
        if (state_ != State::running) return i;
        break;
      case Top::after_value:
        if (c == ',') {
          top_ = Top::key;
        } else if (c == '}') {
          state_ = name_ ? State::done : State::failed;
          return i + 1;
        } else if (!is_space(c)) {
          fail();
          return i;
        }
        break;
    }
    ++i;
  }
  return i;
}

void CallListScanner::drain(std::vector<CallEvent>& out) {
  if (!announced_) {
    if (!call_.name()) return;
    announced_ = true;
    ++num_announced_;
    out.push_back({index_, call_.name(), {}});
  }
  std::string args = call_.take_arguments();
  // A call without arguments takes none.
  if (call_.state() == CallObjectScanner::State::done && !call_.has_arguments()) args += "{}";
  if (args.empty()) return;
  if (!out.empty() && out.back().index == index_) {
    out.back().arguments += args;
  } else {
    out.push_back({index_, std::nullopt, std::move(args)});
  }
}

std::size_t CallListScanner::feed(std::string_view text, std::vector<CallEvent>& out) {
  std::size_t i = 0;
  while (i < text.size() && state_ == State::running) {
    if (in_call_) {
      i += call_.feed(text.substr(i));
      drain(out);
      if (call_.state() == CallObjectScanner::State::failed) {
        state_ = State::failed;
        return i;
      }
      if (call_.state() == CallObjectScanner::State::done) {
        in_call_ = false;
        after_call_ = true;
      }
      continue;
    }
    const char c = text[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (mode_ == Mode::array && !opened_) {
      if (c != '[') {
        state_ = State::failed;
        return i;
      }
      opened_ = true;
      ++i;
      continue;
    }
    const bool separator = c == ',' || (mode_ == Mode::bare && c == ';');
    if (after_call_ && separator) {
      after_call_ = false;
      ++i;
      continue;
    }
    if (c == '{' && (!after_call_ || mode_ == Mode::bare)) {
      call_ = CallObjectScanner();
      in_call_ = true;
      announced_ = false;
      after_call_ = false;
      ++index_;
      continue;  // the object scanner consumes the brace
    }
    if (mode_ == Mode::array && c == ']' && (after_call_ || index_ < 0)) {
      state_ = State::done;
      return i + 1;
    }
    // Bare calls end where other text starts; anything else is not a list.
    state_ = mode_ == Mode::bare && after_call_ ? State::done : State::failed;
    return i;
  }
  return i;
}

void CallListScanner::finish() {
  if (state_ == State::running && mode_ == Mode::bare && after_call_) state_ = State::done;
}

}  // namespace vpod::server::chat_output
