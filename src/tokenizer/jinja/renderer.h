// Evaluates a parsed template. Scoping follows jinja2: a for loop's body and
// a macro's body get a fresh scope per iteration/call (so `set` inside them
// does not leak out, which is why templates use namespace()), `if` does not.
// Every render runs under limits, so a hostile template can neither hang
// nor exhaust memory or the stack.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/render_budget.h"
#include "tokenizer/jinja/value.h"

namespace vpod::tokenizer::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // the rendered text
  // Bytes of strings and lists created during one render, summed: bounds
  // memory and time together (a quadratic `ns.s = ns.s + x` loop hits it).
  size_t max_allocated_bytes = size_t{1} << 30;
  int64_t max_steps = 10'000'000;  // expressions evaluated + statements run + loop iterations
  int max_call_depth = 64;         // nested macro calls
  // Shared by concurrent renders (the server's); nullptr: only the per-render
  // limit applies. Must outlive the render.
  RenderBudget* shared_budget = nullptr;
};

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  // Looks the name up here and in the enclosing scopes.
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
  void clear() { vars_.clear(); }  // keeps the capacity, for reuse by the next loop iteration

 private:
  std::vector<std::pair<std::string, Value>> vars_;  // few per scope: a linear scan is fastest
  std::shared_ptr<Scope> parent_;
};

class Renderer {
 public:
  // `vars` are the render arguments (messages, add_generation_prompt, ...).
  Renderer(const Dict& vars, const RenderLimits& limits, std::optional<std::time_t> now);
  // Gives back what was reserved from the shared budget.
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Renders `body` at the top level and returns the text; throws Error.
  std::string render(const StmtList& body);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value call(const Value& callee, CallArgs& args);

  // Budget accounting, for builtins that build strings and lists.
  void charge(size_t bytes);
  Value make_string(std::string s) {
    charge(s.size());
    return Value(std::move(s));
  }
  Value make_list(std::vector<Value> items, bool is_tuple = false) {
    charge(items.size() * sizeof(Value));
    return Value(List{std::move(items), is_tuple});
  }
  void step();

  // Mutable objects and captured scopes can form reference cycles (a
  // namespace holding itself, a macro stored in the scope it closes over);
  // the renderer breaks them when the render ends.
  void track(std::shared_ptr<Object> object) { tracked_objects_.push_back(std::move(object)); }
  void track(std::shared_ptr<Scope> scope) { tracked_scopes_.push_back(std::move(scope)); }

  // Python/jinja2 semantics shared with the builtins.
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value binary(BinaryOp op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);

  std::time_t now() const;
  int current_line() const { return current_line_; }

 private:
  enum class Flow { normal, break_loop, continue_loop };

  Flow exec(const StmtList& body, const std::shared_ptr<Scope>& scope);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void define_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_call_block(const Stmt& s, const std::shared_ptr<Scope>& scope);
  std::string render_to_string(const StmtList& body, const std::shared_ptr<Scope>& scope);
  void assign(const Target& t, const Value& v, Scope& scope);
  void emit(std::string_view text);

  Value lookup(const std::string& name, const Scope& scope);
  Value eval_slice(const Value& obj, const Expr& slice, const std::shared_ptr<Scope>& scope);
  Value eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope);
  void eval_args(const Expr& e, const std::shared_ptr<Scope>& scope, CallArgs& args);
  Value call_macro(const Stmt& macro, const std::shared_ptr<Scope>& closure, CallArgs& args,
                   std::optional<Value> caller);

  const Dict& vars_;
  RenderLimits limits_;
  std::optional<std::time_t> now_;
  std::string* out_ = nullptr;  // where output goes now (a block set or macro redirects it)
  size_t allocated_bytes_ = 0;
  size_t reserved_bytes_ = 0;  // taken from limits_.shared_budget, >= allocated_bytes_
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int current_line_ = 0;
  std::vector<std::shared_ptr<Object>> tracked_objects_;
  std::vector<std::shared_ptr<Scope>> tracked_scopes_;
};

}  // namespace vpod::tokenizer::jinja
