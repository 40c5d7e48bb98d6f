// The Jinja parser's statement half (parser.h): data, prints and block tags
// (if, for, set, macro, call, filter, with) parsed recursively into the AST;
// parser_expr.cpp has the expressions, with jinja2's precedence.

#include "tokenizer/jinja/parser.h"

#include <initializer_list>

#include "tokenizer/jinja/parser_impl.h"
#include "tokenizer/jinja/pystr.h"

namespace vpod::tokenizer::jinja {

namespace detail {

// jinja2's describe_token: how a token is named in error messages.
std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::data: return "template data / text";
    case TokenType::variable_begin: return "begin of print statement";
    case TokenType::variable_end: return "end of print statement";
    case TokenType::block_begin: return "begin of statement block";
    case TokenType::block_end: return "end of statement block";
    case TokenType::eof: return "end of template";
    case TokenType::integer:
    case TokenType::floating:
    case TokenType::name:
    case TokenType::op: return t.text;
    case TokenType::string: return pystr::repr(t.text);
  }
  return t.text;
}

}  // namespace detail

namespace {

// Tags jinja2 has that this engine does not implement.
bool is_unsupported_tag(std::string_view name) {
  for (std::string_view tag :
       {"block", "extends", "include", "import", "from", "autoescape", "do", "trans"}) {
    if (tag == name) return true;
  }
  return false;
}

}  // namespace

namespace detail {

// ---- statements -------------------------------------------------------

// jinja2's _fail_ut_eof. `stack` is the end tags being looked for, the
// innermost last.
void Parser::fail_unknown_tag_or_eof(const std::string* tag_name, int line,
                                     const std::vector<EndTags>& stack) const {
  std::string message = tag_name ? "Encountered unknown tag '" + *tag_name + "'."
                                 : std::string("Unexpected end of template.");
  if (!stack.empty() && !stack.back().empty()) {
    std::string looking;
    for (std::string_view t : stack.back()) {
      if (!looking.empty()) looking += " or ";
      looking.push_back('\'');
      looking.append(t);
      looking.push_back('\'');
    }
    bool expected_elsewhere = false;
    if (tag_name) {
      for (const auto& tags : stack) {
        for (std::string_view t : tags) expected_elsewhere |= t == *tag_name;
      }
    }
    if (expected_elsewhere) {
      message +=
          " You probably made a nesting mistake. Jinja is expecting this tag, but "
          "currently looking for " +
          looking + ".";
    } else {
      message += " Jinja was looking for the following tags: " + looking + ".";
    }
  }
  if (!tag_stack_.empty()) {
    message += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
  }
  fail(message, line);
}

// Parses data, prints and statements until one of end_tags (the stream is
// left at that tag's name) or the end of the template.
StmtList Parser::subparse(const EndTags& end_tags) {
  StmtList body;
  const bool nested = !end_tags.empty();
  if (nested) end_tag_stack_.push_back(end_tags);
  while (current().type != TokenType::eof) {
    const Token& t = current();
    if (t.type == TokenType::data) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::data;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TokenType::variable_begin) {
      const int line = t.line;
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::output;
      s->line = line;
      s->expr = parse_tuple(/*with_condexpr=*/true, {}, /*explicit_parens=*/false);
      expect_type(TokenType::variable_end, "end of print statement");
      body.push_back(std::move(s));
    } else if (t.type == TokenType::block_begin) {
      next();
      if (nested && at_end_tag(end_tags)) {
        end_tag_stack_.pop_back();
        return body;
      }
      parse_statement(body);
      expect_type(TokenType::block_end, "end of statement block");
    } else {
      fail("unexpected " + describe(t), t.line);
    }
  }
  if (nested) end_tag_stack_.pop_back();
  return body;
}

// After a block tag's header: optional ':' then '%}', then the body up to
// one of end_tags. With drop_needle the end tag's name is consumed.
StmtList Parser::parse_statements(const EndTags& end_tags, bool drop_needle) {
  skip_op(":");
  expect_type(TokenType::block_end, "end of statement block");
  StmtList body = subparse(end_tags);
  if (current().type == TokenType::eof) {
    std::vector<EndTags> stack = end_tag_stack_;
    stack.push_back(end_tags);
    fail_unknown_tag_or_eof(nullptr, current().line, stack);
  }
  if (drop_needle) next();
  return body;
}

void Parser::parse_statement(StmtList& out) {
  const Token& t = current();
  if (t.type != TokenType::name) fail("tag name expected", t.line);
  const std::string tag = t.text;
  const int line = t.line;
  DepthGuard guard(*this, line);
  tag_stack_.push_back(tag);
  if (tag == "if") {
    out.push_back(parse_if());
  } else if (tag == "for") {
    out.push_back(parse_for());
  } else if (tag == "set") {
    out.push_back(parse_set());
  } else if (tag == "macro") {
    out.push_back(parse_macro());
  } else if (tag == "call") {
    out.push_back(parse_call_block());
  } else if (tag == "filter") {
    out.push_back(parse_filter_block());
  } else if (tag == "with") {
    out.push_back(parse_with());
  } else if (tag == "print") {
    next();
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::output;
    s->line = line;
    s->expr = parse_tuple(true, {}, false);
    out.push_back(std::move(s));
  } else if (tag == "break" || tag == "continue") {
    next();
    if (loop_depth_ == 0) fail("'" + tag + "' outside loop", line);
    auto s = std::make_unique<Stmt>();
    s->kind = tag == "break" ? StmtKind::break_ : StmtKind::continue_;
    s->line = line;
    out.push_back(std::move(s));
  } else if (tag == "generation") {
    // Hugging Face's AssistantTracker extension: marks assistant text for
    // return_assistant_tokens_mask; for rendering it is just its body.
    // It is a call block in jinja2, so its body is a macro body: its own
    // scope, and no break/continue out of it.
    next();
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::scope;
    s->line = line;
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endgeneration"}, true);
    loop_depth_ = saved_loop_depth;
    out.push_back(std::move(s));
  } else if (is_unsupported_tag(tag)) {
    unsupported("tag '" + tag + "' is not supported by this template engine", line);
  } else {
    tag_stack_.pop_back();
    fail_unknown_tag_or_eof(&tag, line, end_tag_stack_);
  }
  tag_stack_.pop_back();
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::if_;
  s->line = next().line;  // 'if'
  while (true) {
    ExprPtr condition = parse_tuple(/*with_condexpr=*/false, {}, false);
    StmtList body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(condition), std::move(body));
    const Token& t = next();
    if (t.text == "elif") continue;
    if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
    break;
  }
  return s;
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::for_;
  s->line = next().line;  // 'for'
  s->target = parse_assign_target(/*with_namespace=*/false, {"in"});
  if (!skip_name("in")) fail_expected("in");
  s->expr = parse_tuple(/*with_condexpr=*/false, {"recursive"}, false);
  if (skip_name("if")) s->condition = parse_expression(true);
  if (is_name("recursive")) unsupported("recursive loops are not supported", current().line);
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_set() {
  auto s = std::make_unique<Stmt>();
  const int line = next().line;  // 'set'
  s->line = line;
  s->target = parse_assign_target(/*with_namespace=*/true, {});
  if (skip_op("=")) {
    s->kind = StmtKind::set;
    s->expr = parse_tuple(true, {}, false);
    return s;
  }
  s->kind = StmtKind::set_block;
  while (is_op("|")) {
    next();
    s->filters.push_back(parse_filter_call(nullptr));
  }
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endset"}, true);
  loop_depth_ = saved_loop_depth;
  return s;
}

// jinja2's parse_assign_target.
Target Parser::parse_assign_target(bool with_namespace, const EndTags& extra_end) {
  const int line = current().line;
  if (with_namespace && current().type == TokenType::name && look().type == TokenType::op &&
      look().text == ".") {
    Target t;
    t.kind = Target::Kind::namespace_attr;
    t.line = line;
    t.name = next().text;
    next();  // '.'
    t.attr = expect_name_token().text;
    return t;
  }
  // A tuple of primaries: names, or parenthesized tuples of names.
  std::vector<Target> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_assign_primary());
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (items.empty()) fail("Expected an expression, got '" + describe(current()) + "'", line);
    return std::move(items[0]);
  }
  Target t;
  t.kind = Target::Kind::tuple;
  t.line = line;
  t.items = std::move(items);
  return t;
}

Target Parser::parse_assign_primary() {
  const Token& t = current();
  if (t.type == TokenType::string || t.type == TokenType::integer ||
      t.type == TokenType::floating) {
    fail("can't assign to 'const'", t.line);
  }
  if (is_op("[")) fail("can't assign to 'list'", t.line);
  if (is_op("{")) fail("can't assign to 'dict'", t.line);
  if (t.type == TokenType::name) {
    if (t.text == "true" || t.text == "false" || t.text == "True" || t.text == "False" ||
        t.text == "none" || t.text == "None") {
      fail("can't assign to 'const'", t.line);
    }
    Target target;
    target.kind = Target::Kind::name;
    target.name = t.text;
    target.line = t.line;
    next();
    return target;
  }
  if (is_op("(")) {
    DepthGuard guard(*this, current().line);
    next();
    Target inner = parse_assign_target(false, {});
    expect_op(")");
    return inner;
  }
  if (t.type == TokenType::eof) fail("unexpected end of template", t.line);
  fail("unexpected '" + describe(t) + "'", t.line);
}

void Parser::parse_signature(std::vector<std::string>& params, std::vector<ExprPtr>& defaults) {
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    const Token& name = expect_name_token();
    params.push_back(name.text);
    if (skip_op("=")) {
      defaults.push_back(parse_expression(true));
    } else if (!defaults.empty()) {
      fail("non-default argument follows default argument", name.line);
    }
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::macro;
  s->line = next().line;  // 'macro'
  s->name = expect_name_token().text;
  parse_signature(s->params, s->defaults);
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true);
  loop_depth_ = saved_loop_depth;
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::call_block;
  s->line = next().line;  // 'call'
  if (is_op("(")) parse_signature(s->params, s->defaults);
  s->expr = parse_expression(true);
  if (s->expr->kind != ExprKind::call) fail("expected call", s->line);
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endcall"}, true);
  loop_depth_ = saved_loop_depth;
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::filter_block;
  s->line = next().line;  // 'filter'
  s->filters.push_back(parse_filter_call(nullptr));
  while (is_op("|")) {
    next();
    s->filters.push_back(parse_filter_call(nullptr));
  }
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::with;
  s->line = next().line;  // 'with'
  while (current().type != TokenType::block_end) {
    if (!s->assignments.empty()) expect_op(",");
    Target target = parse_assign_target(false, {});
    expect_op("=");
    s->assignments.emplace_back(std::move(target), parse_expression(true));
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

}  // namespace detail

StmtList parse_template(std::string_view source, const ParseOptions& options) {
  return detail::Parser(tokenize(source, options.lexer), options).parse();
}

}  // namespace vpod::tokenizer::jinja
