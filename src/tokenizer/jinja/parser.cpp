// The Jinja parser (parser.h): a recursive-descent parser from tokens to the
// AST, with jinja2's precedence and tag grammar.

#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace vpod::tokenizer::jinja {

namespace {

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

// Tags jinja2 has that this engine does not implement.
bool is_unsupported_tag(std::string_view name) {
  for (std::string_view tag :
       {"block", "extends", "include", "import", "from", "autoescape", "do", "trans"}) {
    if (tag == name) return true;
  }
  return false;
}

// Expression trees taller than this are refused (evaluation recurses on it).
constexpr int kMaxExprHeight = 256;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseOptions& options)
      : tokens_(std::move(tokens)), options_(options) {}

  StmtList parse() {
    StmtList body = subparse({});
    if (current().type != TokenType::eof) fail("unexpected " + describe(current()), current().line);
    return body;
  }

 private:
  // ---- token stream -----------------------------------------------------
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const {
    return current().type == TokenType::op && current().text == op;
  }
  bool is_name(std::string_view name) const {
    return current().type == TokenType::name && current().text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(std::string message, int line) const {
    throw_error(Error::Kind::syntax, std::move(message), line);
  }
  [[noreturn]] void unsupported(std::string message, int line) const {
    throw_error(Error::Kind::unsupported, std::move(message), line);
  }

  [[noreturn]] void fail_expected(std::string_view expected) const {
    if (current().type == TokenType::eof) {
      fail("unexpected end of template, expected '" + std::string(expected) + "'.", current().line);
    }
    fail("expected token '" + std::string(expected) + "', got '" + describe(current()) + "'",
         current().line);
  }
  const Token& expect_op(std::string_view op) {
    if (!is_op(op)) fail_expected(op);
    return next();
  }
  const Token& expect_name_token() {
    if (current().type != TokenType::name) fail_expected("name");
    return next();
  }
  void expect_type(TokenType type, std::string_view what) {
    if (current().type != type) fail_expected(what);
    next();
  }

  // Guards recursion in expressions and nested blocks.
  struct DepthGuard {
    DepthGuard(Parser& p, int line) : parser(p) {
      if (++parser.depth_ > parser.options_.max_nesting_depth) {
        throw_error(Error::Kind::limit,
                    "template nests deeper than " +
                        std::to_string(parser.options_.max_nesting_depth) + " levels",
                    line);
      }
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Records a finished node's height and refuses trees too tall to evaluate
  // (and destroy) recursively, such as `1+1+1+...` repeated 100k times.
  ExprPtr seal(ExprPtr e) {
    int h = 0;
    auto take = [&h](const ExprPtr& child) {
      if (child) h = std::max(h, child->height);
    };
    take(e->target);
    take(e->other);
    take(e->third);
    for (const auto& item : e->items) take(item);
    for (const auto& [name, value] : e->kwargs) take(value);
    for (const auto& [op, value] : e->comparisons) take(value);
    e->height = h + 1;
    if (e->height > kMaxExprHeight) {
      throw_error(Error::Kind::limit,
                  "expression nests deeper than " + std::to_string(kMaxExprHeight) + " levels",
                  e->line);
    }
    return e;
  }

  // ---- statements -------------------------------------------------------
  using EndTags = std::vector<std::string_view>;

  bool at_end_tag(const EndTags& end_tags) const {
    if (current().type != TokenType::name) return false;
    for (std::string_view tag : end_tags) {
      if (current().text == tag) return true;
    }
    return false;
  }

  // jinja2's _fail_ut_eof. `stack` is the end tags being looked for, the
  // innermost last.
  [[noreturn]] void fail_unknown_tag_or_eof(const std::string* tag_name, int line,
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
  StmtList subparse(const EndTags& end_tags) {
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
  StmtList parse_statements(const EndTags& end_tags, bool drop_needle) {
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

  void parse_statement(StmtList& out) {
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

  StmtPtr parse_if() {
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

  StmtPtr parse_for() {
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

  StmtPtr parse_set() {
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
  Target parse_assign_target(bool with_namespace, const EndTags& extra_end) {
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

  Target parse_assign_primary() {
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

  void parse_signature(std::vector<std::string>& params, std::vector<ExprPtr>& defaults) {
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

  StmtPtr parse_macro() {
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

  StmtPtr parse_call_block() {
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

  StmtPtr parse_filter_block() {
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

  StmtPtr parse_with() {
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

  // ---- expressions ------------------------------------------------------
  bool is_tuple_end(const EndTags& extra_end) const {
    const Token& t = current();
    if (t.type == TokenType::variable_end || t.type == TokenType::block_end ||
        t.type == TokenType::eof || (t.type == TokenType::op && t.text == ")")) {
      return true;
    }
    return at_end_tag(extra_end);
  }

  ExprPtr parse_tuple(bool with_condexpr, const EndTags& extra_end, bool explicit_parens) {
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

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this, current().line);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
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

  ExprPtr parse_or() {
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

  ExprPtr parse_and() {
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

  ExprPtr parse_not() {
    if (is_name("not")) {
      const int line = next().line;
      DepthGuard guard(*this, line);
      auto e = make(ExprKind::logical_not, line);
      e->target = parse_not();
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr make_binary(BinaryOp op, ExprPtr left, ExprPtr right, int line) {
    auto e = make(ExprKind::binary, line);
    e->binary_op = op;
    e->target = std::move(left);
    e->other = std::move(right);
    return seal(std::move(e));
  }

  ExprPtr parse_math1() {
    int line = current().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinaryOp op = next().text == "+" ? BinaryOp::add : BinaryOp::sub;
      left = make_binary(op, std::move(left), parse_concat(), line);
      line = current().line;
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = current().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::concat, line);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return seal(std::move(e));
  }

  ExprPtr parse_math2() {
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

  ExprPtr parse_pow() {
    int line = current().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      left = make_binary(BinaryOp::pow, std::move(left), parse_unary(true), line);
      line = current().line;
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_list() {
    auto e = make(ExprKind::list, next().line);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return seal(std::move(e));
  }

  ExprPtr parse_dict() {
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

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
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

  ExprPtr parse_subscribed() {
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

  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::call, current().line);
    e->target = std::move(node);
    parse_call_args(*e);
    return seal(std::move(e));
  }

  std::string parse_dotted_name() {
    std::string name = expect_name_token().text;
    while (is_op(".")) {
      next();
      name += "." + expect_name_token().text;
    }
    return name;
  }

  // `name(args)` after a '|' (or at the start of a filter block).
  ExprPtr parse_filter_call(ExprPtr input) {
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

  ExprPtr parse_test(ExprPtr node) {
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

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const ParseOptions& options_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<EndTags> end_tag_stack_;
  std::vector<std::string> tag_stack_;
};

}  // namespace

StmtList parse_template(std::string_view source, const ParseOptions& options) {
  return Parser(tokenize(source, options.lexer), options).parse();
}

}  // namespace vpod::tokenizer::jinja
