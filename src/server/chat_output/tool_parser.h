// Tool-call parsers: a model's text in (as it streams), content and tool-call
// pieces out. One parser per choice; feed() is given each new piece of text
// and finish() once the text has ended. Held-back bytes (a partial tag such
// as "<tool_c") come out with the next piece that settles them.
//
// Streamed output cannot be taken back, so a call whose JSON turns out broken
// after its name went out stays sent; malformed() then tells non-streamed
// output to answer with the whole text as content, as vLLM does.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/chat_output/call_scanner.h"
#include "server/chat_output/parser_kinds.h"

namespace vpod::server::chat_output {

// Content and tool-call pieces produced by one feed. A call's first piece
// carries its name; argument text follows in order (CallEvent).
struct ParsedText {
  std::string content;
  std::vector<CallEvent> calls;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual void feed(std::string_view text, ParsedText& out) = 0;
  virtual void finish(ParsedText& out) = 0;
  // A call was broken or unfinished (see the header comment).
  virtual bool malformed() const = 0;
};

// The parser for a model's own call syntax (tool_choice auto); none for none.
std::unique_ptr<ToolCallParser> make_tool_parser(ToolParserKind kind);
std::unique_ptr<ToolCallParser> make_hermes_parser();
std::unique_ptr<ToolCallParser> make_llama3_json_parser();
std::unique_ptr<ToolCallParser> make_mistral_parser();
// A required tool_choice's constrained output: [{"name", "parameters"}, ...].
std::unique_ptr<ToolCallParser> make_required_parser();
// A named tool_choice's constrained output: the function's arguments.
std::unique_ptr<ToolCallParser> make_named_parser(std::string function_name);

// How many bytes at the end of `text` could begin `tag` (a proper prefix of
// it): the bytes to hold back until the next piece shows what they are.
std::size_t partial_tag_length(std::string_view text, std::string_view tag);

// Appends `events` to `out` with their indices shifted by `base`, merging
// argument text of the same call into one event.
void append_events(std::vector<CallEvent>& out, std::vector<CallEvent>&& events, int base);

}  // namespace vpod::server::chat_output
