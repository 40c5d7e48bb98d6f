// What a request constrains its output to (structured output): the server
// turns response_format, vLLM's structured_outputs / guided_* options and a
// required or named tool_choice into one Constraint; the engine compiles it
// (cached by kind + spec) and keeps one matcher per request whose token
// bitmask the sampler applies.
#pragma once

#include <string>

namespace vpod::grammar {

enum class ConstraintKind {
  none,            // unconstrained
  json_object,     // any JSON object (response_format json_object, structured_outputs.json_object)
  json_schema,     // spec: the JSON Schema text
  regex,           // spec: the regular expression
  choice,          // spec: a JSON array of the allowed strings
  ebnf,            // spec: the grammar in (GBNF-style) EBNF
  structural_tag,  // spec: the structural tag JSON (vLLM's structural_tag)
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::none;
  std::string spec;
  // JSON Schema only: false allows what xgrammar's non-strict mode allows
  // (extra properties where the schema is silent); OpenAI's strict: true.
  bool strict = true;
  // JSON (schema or object): whitespace allowed between tokens. vLLM's
  // disable_any_whitespace sets it false: compact JSON, cheaper masks (a
  // model stuck in whitespace cannot be), docs/structured_output.md.
  bool any_whitespace = true;

  bool active() const { return kind != ConstraintKind::none; }
};

}  // namespace vpod::grammar
