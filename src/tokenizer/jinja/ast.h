// The parsed template: expressions and statements, mirroring jinja2's nodes.
// Filters and tests are resolved to functions at parse time, so a template
// naming one this engine lacks fails to parse, with its line.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace vpod::tokenizer::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

// A filter receives its input and call arguments; a test returns a bool.
using FilterFn = Value (*)(Renderer& r, const Value& input, CallArgs& args);
using TestFn = bool (*)(Renderer& r, const Value& input, CallArgs& args);

enum class ExprKind {
  constant,     // value
  name,         // name
  list,         // items
  tuple,        // items
  dict,         // items: key0, value0, key1, value1, ...
  getattr,      // target.name
  getitem,      // target[other]
  slice,        // items: start, stop, step (each may be null); only as a getitem key
  call,         // target(items..., kwargs...)
  filter,       // target | name(items..., kwargs...); target is null in filter blocks
  test,         // target is name(items..., kwargs...)
  negate,       // -target
  plus,         // +target
  logical_not,  // not target
  binary,       // target <binary_op> other
  logical_and,  // target and other
  logical_or,   // target or other
  concat,       // items joined with ~
  compare,      // target <op> comparisons[0] <op> comparisons[1] ...
  condition,    // target if other else third (third may be null: undefined)
};

enum class BinaryOp { add, sub, mul, div, floordiv, mod, pow };
enum class CompareOp { eq, ne, lt, le, gt, ge, in, not_in };

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;       // constant
  std::string name;  // name, attribute, filter or test name
  BinaryOp binary_op = BinaryOp::add;
  ExprPtr target;
  ExprPtr other;
  ExprPtr third;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<CompareOp, ExprPtr>> comparisons;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
  int height = 1;  // of this subtree; bounded by the parser so evaluation cannot overflow the stack
};

// The left side of set / for / with: a name, a tuple of targets, or a
// namespace attribute (`ns.attr`, set only).
struct Target {
  enum class Kind { name, tuple, namespace_attr };
  Kind kind = Kind::name;
  std::string name;  // the name, or the namespace variable
  std::string attr;  // namespace_attr
  std::vector<Target> items;
  int line = 0;
};

enum class StmtKind {
  data,          // text
  output,        // {{ expr }}
  if_,           // branches (if, elif...), else_body
  for_,          // target, expr (iterable), condition (filter), body, else_body
  set,           // target = expr
  set_block,     // target = rendered body | filters
  macro,         // name(params = defaults) body
  call_block,    // {% call(params) expr %} body: `caller` inside the called macro
  filter_block,  // body | filters
  with,          // assignments, body
  break_,
  continue_,
  scope,  // body in a child scope: HF's {% generation %} blocks (a call block in jinja2)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // data
  ExprPtr expr;
  ExprPtr condition;
  Target target;
  StmtList body;
  StmtList else_body;
  std::string name;                 // macro
  std::vector<std::string> params;  // macro / call block
  std::vector<ExprPtr> defaults;    // for the last defaults.size() params
  std::vector<ExprPtr> filters;     // filter_block / set_block, applied in order
  std::vector<std::pair<Target, ExprPtr>> assignments;  // with
  std::vector<std::pair<ExprPtr, StmtList>> branches;   // if_: condition and body, in order
};

}  // namespace vpod::tokenizer::jinja
