// The parser class shared by parser.cpp (statements) and parser_expr.cpp
// (expressions); private to those two files.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/parser.h"

namespace vpod::tokenizer::jinja::detail {

// jinja2's describe_token: how a token is named in error messages.
std::string describe(const Token& t);

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

  [[noreturn]] void fail_unknown_tag_or_eof(const std::string* tag_name, int line,
                                            const std::vector<EndTags>& stack) const;
  StmtList subparse(const EndTags& end_tags);
  StmtList parse_statements(const EndTags& end_tags, bool drop_needle);
  void parse_statement(StmtList& out);
  StmtPtr parse_if();
  StmtPtr parse_for();
  StmtPtr parse_set();
  Target parse_assign_target(bool with_namespace, const EndTags& extra_end);
  Target parse_assign_primary();
  void parse_signature(std::vector<std::string>& params, std::vector<ExprPtr>& defaults);
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();

  // ---- expressions ------------------------------------------------------
  bool is_tuple_end(const EndTags& extra_end) const;
  ExprPtr parse_tuple(bool with_condexpr, const EndTags& extra_end, bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr make_binary(BinaryOp op, ExprPtr left, ExprPtr right, int line);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string parse_dotted_name();
  ExprPtr parse_filter_call(ExprPtr input);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const ParseOptions& options_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<EndTags> end_tag_stack_;
  std::vector<std::string> tag_stack_;
};

}  // namespace vpod::tokenizer::jinja::detail
