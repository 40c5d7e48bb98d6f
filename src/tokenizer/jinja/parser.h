// Builds the AST from tokens, following jinja2's parser (operator
// precedence, test-argument rules, tuple parsing) so a template means the
// same thing here as in Python. Unsupported constructs raise at parse time
// with the template line and what was not understood.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace vpod::tokenizer::jinja {

struct ParseOptions {
  LexerOptions lexer;
  // Maximum nesting of expressions and blocks; deeper templates are refused
  // so that parsing and rendering never exhaust the stack.
  int max_nesting_depth = 96;
};

// Throws Error (syntax or unsupported) with the line.
StmtList parse_template(std::string_view source, const ParseOptions& options);

}  // namespace vpod::tokenizer::jinja
