// The expression half of the jinja parser: tuples, operators by precedence,
// literals, subscripts, calls, filters and tests (jinja2's parse_* methods).
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"

namespace vpod::tokenizer::jinja::detail {

bool Parser::is_tuple_end(const EndTags& extra_end) const {
  const Token& t = current();
  if (t.type == TokenType::variable_end || t.type == TokenType::block_end ||
      t.type == TokenType::eof || (t.type == TokenType::op && t.text == ")")) {
    return true;
  }
  return at_end_tag(extra_end);
}

ExprPtr Parser::parse_tuple(bool with_condexpr, const EndTags& extra_end, bool explicit_parens) {
  const int line = current().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) {
      fail("Expected an expression, got '" + describe(current()) + "'", current().line);
    }
  }
  auto e = make(ExprKind::tuple, line);
  e->items = std::move(items);
  return seal(std::move(e));
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this, current().line);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  int line = current().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    auto e = make(ExprKind::condition, line);
    e->other = parse_or();  // the condition
    if (skip_name("else")) e->third = parse_condexpr();
    e->target = std::move(expr1);
    expr1 = seal(std::move(e));
    line = current().line;
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  int line = current().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) {
    auto e = make(ExprKind::logical_or, line);
    e->target = std::move(left);
    e->other = parse_and();
    left = seal(std::move(e));
    line = current().line;
  }
  return left;
}

ExprPtr Parser::parse_and() {
  int line = current().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) {
    auto e = make(ExprKind::logical_and, line);
    e->target = std::move(left);
    e->other = parse_not();
    left = seal(std::move(e));
    line = current().line;
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const int line = next().line;
    DepthGuard guard(*this, line);
    auto e = make(ExprKind::logical_not, line);
    e->target = parse_not();
    return seal(std::move(e));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = current().line;
  ExprPtr expr = parse_math1();
  std::vector<std::pair<CompareOp, ExprPtr>> ops;
  while (true) {
    const Token& t = current();
    std::optional<CompareOp> op;
    if (t.type == TokenType::op) {
      if (t.text == "==") op = CompareOp::eq;
      if (t.text == "!=") op = CompareOp::ne;
      if (t.text == "<") op = CompareOp::lt;
      if (t.text == "<=") op = CompareOp::le;
      if (t.text == ">") op = CompareOp::gt;
      if (t.text == ">=") op = CompareOp::ge;
      if (op) next();
    } else if (is_name("in")) {
      next();
      op = CompareOp::in;
    } else if (is_name("not") && look().type == TokenType::name && look().text == "in") {
      next();
      next();
      op = CompareOp::not_in;
    }
    if (!op) break;
    ops.emplace_back(*op, parse_math1());
  }
  if (ops.empty()) return expr;
  auto e = make(ExprKind::compare, line);
  e->target = std::move(expr);
  e->comparisons = std::move(ops);
  return seal(std::move(e));
}

ExprPtr Parser::make_binary(BinaryOp op, ExprPtr left, ExprPtr right, int line) {
  auto e = make(ExprKind::binary, line);
  e->binary_op = op;
  e->target = std::move(left);
  e->other = std::move(right);
  return seal(std::move(e));
}

ExprPtr Parser::parse_math1() {
  int line = current().line;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const BinaryOp op = next().text == "+" ? BinaryOp::add : BinaryOp::sub;
    left = make_binary(op, std::move(left), parse_concat(), line);
    line = current().line;
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = current().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make(ExprKind::concat, line);
  e->items.push_back(std::move(first));
  while (skip_op("~")) e->items.push_back(parse_math2());
  return seal(std::move(e));
}

ExprPtr Parser::parse_math2() {
  int line = current().line;
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = next().text;
    const BinaryOp bop = op == "*"    ? BinaryOp::mul
                         : op == "/"  ? BinaryOp::div
                         : op == "//" ? BinaryOp::floordiv
                                      : BinaryOp::mod;
    left = make_binary(bop, std::move(left), parse_pow(), line);
    line = current().line;
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  int line = current().line;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) {
    left = make_binary(BinaryOp::pow, std::move(left), parse_unary(true), line);
    line = current().line;
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const int line = current().line;
  DepthGuard guard(*this, line);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const bool neg = next().text == "-";
    node = make(neg ? ExprKind::negate : ExprKind::plus, line);
    node->target = parse_unary(false);
    node = seal(std::move(node));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = current();
  const int line = t.line;
  if (t.type == TokenType::name) {
    ExprPtr e;
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      e = make(ExprKind::constant, line);
      e->value = Value(t.text == "true" || t.text == "True");
    } else if (t.text == "none" || t.text == "None") {
      e = make(ExprKind::constant, line);
      e->value = Value(None{});
    } else {
      e = make(ExprKind::name, line);
      e->name = t.text;
    }
    next();
    return e;
  }
  if (t.type == TokenType::string) {
    std::string text;
    while (current().type == TokenType::string) text += next().text;  // adjacent literals join
    auto e = make(ExprKind::constant, line);
    e->value = Value(std::move(text));
    return e;
  }
  if (t.type == TokenType::integer || t.type == TokenType::floating) {
    auto e = make(ExprKind::constant, line);
    e->value = t.type == TokenType::integer ? Value(t.int_value) : Value(t.float_value);
    next();
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(true, {}, /*explicit_parens=*/true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  if (t.type == TokenType::eof) fail("unexpected end of template", line);
  fail("unexpected '" + describe(t) + "'", line);
}

ExprPtr Parser::parse_list() {
  auto e = make(ExprKind::list, next().line);
  while (!is_op("]")) {
    if (!e->items.empty()) expect_op(",");
    if (is_op("]")) break;
    e->items.push_back(parse_expression(true));
  }
  expect_op("]");
  return seal(std::move(e));
}

ExprPtr Parser::parse_dict() {
  auto e = make(ExprKind::dict, next().line);
  while (!is_op("}")) {
    if (!e->items.empty()) expect_op(",");
    if (is_op("}")) break;
    e->items.push_back(parse_expression(true));
    expect_op(":");
    e->items.push_back(parse_expression(true));
  }
  expect_op("}");
  return seal(std::move(e));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      next();
      node = parse_filter_call(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  const int line = t.line;
  if (t.text == ".") {
    const Token& attr = next();
    if (attr.type == TokenType::name) {
      auto e = make(ExprKind::getattr, line);
      e->target = std::move(node);
      e->name = attr.text;
      return seal(std::move(e));
    }
    if (attr.type != TokenType::integer) fail("expected name or number", attr.line);
    auto key = make(ExprKind::constant, attr.line);
    key->value = Value(attr.int_value);
    auto e = make(ExprKind::getitem, line);
    e->target = std::move(node);
    e->other = std::move(key);
    return seal(std::move(e));
  }
  // '['
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  auto e = make(ExprKind::getitem, line);
  e->target = std::move(node);
  if (args.size() == 1) {
    e->other = std::move(args[0]);
  } else {
    auto tuple = make(ExprKind::tuple, line);
    tuple->items = std::move(args);
    e->other = seal(std::move(tuple));
  }
  return seal(std::move(e));
}

ExprPtr Parser::parse_subscribed() {
  const int line = current().line;
  auto slice = make(ExprKind::slice, line);
  if (is_op(":")) {
    next();
    slice->items.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression(true);
    if (!is_op(":")) return node;
    next();
    slice->items.push_back(std::move(node));
  }
  if (is_op(":") || is_op("]") || is_op(",")) {
    slice->items.push_back(nullptr);
  } else {
    slice->items.push_back(parse_expression(true));
  }
  if (skip_op(":")) {
    if (is_op("]") || is_op(",")) {
      slice->items.push_back(nullptr);
    } else {
      slice->items.push_back(parse_expression(true));
    }
  } else {
    slice->items.push_back(nullptr);
  }
  return seal(std::move(slice));
}

void Parser::parse_call_args(Expr& e) {
  const int line = expect_op("(").line;
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;  // trailing comma
    }
    if (is_op("*") || is_op("**")) {
      unsupported("*args and **kwargs in calls are not supported", current().line);
    }
    if (current().type == TokenType::name && look().type == TokenType::op && look().text == "=") {
      std::string key = next().text;
      next();  // '='
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail("invalid syntax for function call expression", line);
      e.items.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make(ExprKind::call, current().line);
  e->target = std::move(node);
  parse_call_args(*e);
  return seal(std::move(e));
}

std::string Parser::parse_dotted_name() {
  std::string name = expect_name_token().text;
  while (is_op(".")) {
    next();
    name += "." + expect_name_token().text;
  }
  return name;
}

// `name(args)` after a '|' (or at the start of a filter block).
ExprPtr Parser::parse_filter_call(ExprPtr input) {
  const int line = current().line;
  auto e = make(ExprKind::filter, line);
  e->target = std::move(input);
  e->name = parse_dotted_name();
  e->filter = find_filter(e->name);
  if (!e->filter) {
    if (is_unsupported_jinja2_filter(e->name)) {
      unsupported("filter '" + e->name + "' is not supported by this template engine", line);
    }
    fail("No filter named '" + e->name + "'.", line);
  }
  if (is_op("(")) parse_call_args(*e);
  return seal(std::move(e));
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = next().line;  // 'is'
  const bool negated = skip_name("not");
  auto e = make(ExprKind::test, line);
  e->target = std::move(node);
  e->name = parse_dotted_name();
  e->test = find_test(e->name);
  if (!e->test) {
    if (is_unsupported_jinja2_test(e->name)) {
      unsupported("test '" + e->name + "' is not supported by this template engine", line);
    }
    fail("No test named '" + e->name + "'.", line);
  }
  const Token& t = current();
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((t.type == TokenType::name || t.type == TokenType::string ||
              t.type == TokenType::integer || t.type == TokenType::floating || is_op("[") ||
              is_op("{")) &&
             !(is_name("else") || is_name("or") || is_name("and"))) {
    // One argument without parentheses: `x is divisibleby 3`, `x is sameas none`.
    if (is_name("is")) fail("You cannot chain multiple tests with is", t.line);
    e->items.push_back(parse_postfix(parse_primary()));
  }
  if (!negated) return seal(std::move(e));
  auto n = make(ExprKind::logical_not, line);
  n->target = seal(std::move(e));
  return seal(std::move(n));
}

}  // namespace vpod::tokenizer::jinja::detail
