// The Jinja renderer (renderer.h): scopes, statement execution, expression
// evaluation, macros, and the limits every render is charged against.

#include "tokenizer/jinja/renderer.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace vpod::tokenizer::jinja {

namespace {

// jinja2's LoopContext: the `loop` variable inside a for loop.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  explicit LoopObject(std::vector<Value> items) : items_(std::move(items)) {}

  void set_index(size_t index0) { index0_ = index0; }
  const std::vector<Value>& items() const { return items_; }

  std::string_view class_name() const override { return "jinja2.runtime.LoopContext"; }
  std::optional<int64_t> length() const override { return size(); }
  std::string repr(int) const override {
    return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(size()) + ">";
  }

  std::optional<Value> get_attr(std::string_view name) const override {
    const int64_t n = size();
    const auto i = static_cast<int64_t>(index0_);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(1);
    if (name == "depth0") return Value(0);
    if (name == "previtem") {
      if (i == 0) return Value::undefined("there is no previous item");
      return items_[index0_ - 1];
    }
    if (name == "nextitem") {
      if (i + 1 >= n) return Value::undefined("there is no next item");
      return items_[index0_ + 1];
    }
    if (name == "cycle") {
      auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
      return Value(std::make_shared<const Callable>(
          Callable{"loop.cycle", [self](Renderer&, CallArgs& args) -> Value {
                     if (args.positional.empty()) throw_runtime("no items for cycling given");
                     return args.positional[self->index0_ % args.positional.size()];
                   }}));
    }
    if (name == "changed") {
      auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
      return Value(std::make_shared<const Callable>(
          Callable{"loop.changed", [self](Renderer& r, CallArgs& args) -> Value {
                     // The loop now holds template values: release them when
                     // the render ends.
                     if (!self->last_changed_) r.track(std::static_pointer_cast<Object>(self));
                     Value current = Value::tuple(args.positional);
                     if (self->last_changed_ && py_equal(*self->last_changed_, current)) {
                       return Value(false);
                     }
                     self->last_changed_ = std::move(current);
                     return Value(true);
                   }}));
    }
    return std::nullopt;
  }

  void release() override { last_changed_.reset(); }

 private:
  int64_t size() const { return static_cast<int64_t>(items_.size()); }

  std::vector<Value> items_;
  size_t index0_ = 0;
  std::optional<Value> last_changed_;
};

// <, <=, >, >= with Python semantics (NaN compares false both ways).
bool ordered(CompareOp op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number() && (a.is_float() || b.is_float())) {
    const double x = a.to_double();
    const double y = b.to_double();
    switch (op) {
      case CompareOp::lt: return x < y;
      case CompareOp::le: return x <= y;
      case CompareOp::gt: return x > y;
      default: return x >= y;
    }
  }
  const int c = py_compare(a, b);
  switch (op) {
    case CompareOp::lt: return c < 0;
    case CompareOp::le: return c <= 0;
    case CompareOp::gt: return c > 0;
    default: return c >= 0;
  }
}

}  // namespace

// ---- Scope -----------------------------------------------------------------

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    for (const auto& [k, v] : s->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value value) {
  for (auto& [k, v] : vars_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

// ---- Renderer --------------------------------------------------------------

Renderer::Renderer(const Dict& vars, const RenderLimits& limits, std::optional<std::time_t> now)
    : vars_(vars), limits_(limits), now_(now) {}

std::time_t Renderer::now() const { return now_ ? *now_ : std::time(nullptr); }

Renderer::~Renderer() {
  if (limits_.shared_budget != nullptr) limits_.shared_budget->release(reserved_bytes_);
}

void Renderer::charge(size_t bytes) {
  if (bytes >
      limits_.max_allocated_bytes - std::min(allocated_bytes_, limits_.max_allocated_bytes)) {
    allocated_bytes_ = SIZE_MAX;
    throw_error(Error::Kind::limit, "template rendering allocated more than " +
                                        std::to_string(limits_.max_allocated_bytes) + " bytes");
  }
  allocated_bytes_ += bytes;
  if (limits_.shared_budget != nullptr && allocated_bytes_ > reserved_bytes_) {
    // Reserve in grains, so most charges touch no shared counter.
    constexpr size_t kGrain = size_t{1} << 20;
    const size_t need = std::max(kGrain, allocated_bytes_ - reserved_bytes_);
    if (!limits_.shared_budget->try_reserve(need)) {
      throw_error(Error::Kind::busy,
                  "chat templates being rendered by other requests use the server's template "
                  "memory (" +
                      std::to_string(limits_.shared_budget->capacity()) + " bytes); retry later");
    }
    reserved_bytes_ += need;
  }
}

void Renderer::step() {
  if (++steps_ > limits_.max_steps) {
    throw_error(Error::Kind::limit,
                "template rendering exceeded " + std::to_string(limits_.max_steps) + " steps");
  }
}

void Renderer::emit(std::string_view text) {
  charge(text.size());
  out_->append(text);
  if (out_->size() > limits_.max_output_bytes) {
    throw_error(Error::Kind::limit,
                "template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

std::string Renderer::render(const StmtList& body) {
  std::string out;
  out_ = &out;
  auto top = std::make_shared<Scope>(nullptr);
  track(top);
  struct BreakCycles {
    Renderer& r;
    ~BreakCycles() {
      for (auto& scope : r.tracked_scopes_) scope->clear();
      for (auto& object : r.tracked_objects_) object->release();
    }
  } break_cycles{*this};
  try {
    exec(body, top);
  } catch (Error& e) {
    if (e.line == 0) e.line = current_line_;
    throw;
  }
  return out;
}

std::string Renderer::render_to_string(const StmtList& body, const std::shared_ptr<Scope>& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Renderer::Flow Renderer::exec(const StmtList& body, const std::shared_ptr<Scope>& scope) {
  for (const auto& s : body) {
    const Flow flow = exec_stmt(*s, scope);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Renderer::Flow Renderer::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  step();
  current_line_ = s.line;
  switch (s.kind) {
    case StmtKind::data: emit(s.text); return Flow::normal;
    case StmtKind::output: {
      const Value v = eval(*s.expr, scope);
      if (v.is_string()) {
        emit(v.str());
      } else {
        emit(to_str(v));
      }
      return Flow::normal;
    }
    case StmtKind::if_:
      for (const auto& [condition, body] : s.branches) {
        if (truthy(eval(*condition, scope))) return exec(body, scope);
      }
      return exec(s.else_body, scope);
    case StmtKind::for_: return exec_for(s, scope);
    case StmtKind::set: assign(s.target, eval(*s.expr, scope), *scope); return Flow::normal;
    case StmtKind::set_block: exec_set(s, scope); return Flow::normal;
    case StmtKind::macro: define_macro(s, scope); return Flow::normal;
    case StmtKind::call_block: exec_call_block(s, scope); return Flow::normal;
    case StmtKind::filter_block: {
      Value v = make_string(render_to_string(s.body, scope));
      for (const auto& f : s.filters) {
        CallArgs args;
        eval_args(*f, scope, args);
        v = f->filter(*this, v, args);
      }
      emit(to_str(v));
      return Flow::normal;
    }
    case StmtKind::with: {
      auto inner = std::make_shared<Scope>(scope);
      std::vector<Value> values;
      for (const auto& [target, expr] : s.assignments) values.push_back(eval(*expr, scope));
      for (size_t i = 0; i < values.size(); ++i) assign(s.assignments[i].first, values[i], *inner);
      return exec(s.body, inner);
    }
    case StmtKind::break_: return Flow::break_loop;
    case StmtKind::continue_: return Flow::continue_loop;
    case StmtKind::scope: {
      auto inner = std::make_shared<Scope>(scope);
      exec(s.body, inner);
      return Flow::normal;
    }
  }
  return Flow::normal;
}

Renderer::Flow Renderer::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  const Value iterable = eval(*s.expr, scope);
  std::vector<Value> items = iterate(iterable);
  charge(items.size() * sizeof(Value));
  if (s.condition) {
    // `for x in xs if cond`: filtered before the loop, so loop.length and
    // loop.last count only the items that pass.
    std::vector<Value> kept;
    for (auto& item : items) {
      step();
      auto probe = std::make_shared<Scope>(scope);
      assign(s.target, item, *probe);
      if (truthy(eval(*s.condition, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<LoopObject>(std::move(items));
  const Value loop_value(std::static_pointer_cast<Object>(loop));
  // jinja2 runs the else block unless some iteration ran its body to the end.
  bool completed_any = false;
  // Each iteration gets a fresh scope; the previous one is reused unless a
  // macro defined in the body captured it.
  std::shared_ptr<Scope> inner;
  const std::vector<Value>& loop_items = loop->items();
  for (size_t i = 0; i < loop_items.size(); ++i) {
    step();
    loop->set_index(i);
    if (inner && inner.use_count() == 1) {
      inner->clear();
    } else {
      inner = std::make_shared<Scope>(scope);
    }
    inner->set("loop", loop_value);
    assign(s.target, loop_items[i], *inner);
    const Flow flow = exec(s.body, inner);
    if (flow == Flow::break_loop) break;
    if (flow == Flow::normal) completed_any = true;
  }
  if (!completed_any) return exec(s.else_body, scope);
  return Flow::normal;
}

void Renderer::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value v = make_string(render_to_string(s.body, scope));
  for (const auto& f : s.filters) {
    CallArgs args;
    eval_args(*f, scope, args);
    v = f->filter(*this, v, args);
  }
  assign(s.target, v, *scope);
}

void Renderer::assign(const Target& t, const Value& v, Scope& scope) {
  switch (t.kind) {
    case Target::Kind::name: scope.set(t.name, v); return;
    case Target::Kind::namespace_attr: {
      const Value* ns = scope.find(t.name);
      Value target = ns ? *ns : lookup(t.name, scope);
      if (!target.is_object() || !target.object().set_attr(t.attr, v)) {
        current_line_ = t.line;
        throw_runtime("cannot assign attribute on non-namespace object");
      }
      return;
    }
    case Target::Kind::tuple: {
      if (v.is_undefined()) fail_undefined(v);
      const std::vector<Value> items = iterate(v);
      if (items.size() != t.items.size()) {
        current_line_ = t.line;
        if (items.size() > t.items.size()) {
          throw_runtime("too many values to unpack (expected " + std::to_string(t.items.size()) +
                        ")");
        }
        throw_runtime("not enough values to unpack (expected " + std::to_string(t.items.size()) +
                      ", got " + std::to_string(items.size()) + ")");
      }
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope);
      return;
    }
  }
}

Value Renderer::call_macro(const Stmt& macro, const std::shared_ptr<Scope>& closure, CallArgs& args,
                           std::optional<Value> caller) {
  if (call_depth_ >= limits_.max_call_depth) {
    throw_error(Error::Kind::limit,
                "macro calls nest deeper than " + std::to_string(limits_.max_call_depth));
  }
  const size_t num_params = macro.params.size();
  if (args.positional.size() > num_params) {
    throw_runtime("macro '" + macro.name + "' takes not more than " + std::to_string(num_params) +
                  " argument(s)");
  }
  auto inner = std::make_shared<Scope>(closure);
  std::vector<bool> bound(num_params, false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    inner->set(macro.params[i], args.positional[i]);
    bound[i] = true;
  }
  for (auto& [name, value] : args.keyword) {
    if (name == "caller" && !caller) {
      caller = value;
      continue;
    }
    size_t i = 0;
    while (i < num_params && macro.params[i] != name) ++i;
    if (i == num_params) {
      throw_runtime("macro '" + macro.name + "' takes no keyword argument '" + name + "'");
    }
    if (bound[i]) {
      throw_runtime("macro '" + macro.name + "' got multiple values for argument '" + name + "'");
    }
    inner->set(name, value);
    bound[i] = true;
  }
  const size_t first_default = num_params - macro.defaults.size();
  for (size_t i = 0; i < num_params; ++i) {
    if (bound[i]) continue;
    if (i >= first_default) {
      inner->set(macro.params[i], eval(*macro.defaults[i - first_default], inner));
    } else {
      inner->set(macro.params[i], Value::undefined("parameter " + pystr::repr(macro.params[i]) +
                                                   " was not provided"));
    }
  }
  if (caller) inner->set("caller", *caller);
  ++call_depth_;
  std::string text;
  try {
    text = render_to_string(macro.body, inner);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value(std::move(text));
}

void Renderer::define_macro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  // The macro sees its defining scope as it is when called (late binding,
  // like Python closures in jinja2's generated code).
  const Stmt* macro = &s;
  std::shared_ptr<Scope> closure = scope;
  track(closure);
  Value fn(std::make_shared<const Callable>(
      Callable{s.name, [macro, closure](Renderer& r, CallArgs& args) -> Value {
                 return r.call_macro(*macro, closure, args, std::nullopt);
               }}));
  scope->set(s.name, fn);
}

void Renderer::exec_call_block(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  // {% call(params) m(args) %}body{% endcall %}: m receives caller(), which
  // renders the body.
  const Stmt* block = &s;
  std::shared_ptr<Scope> closure = scope;
  track(closure);
  Value caller(std::make_shared<const Callable>(Callable{
      "caller", [block, closure](Renderer& r, CallArgs& args) -> Value {
        // Bind the call block's own parameters like a macro's.
        if (args.positional.size() > block->params.size()) {
          throw_runtime("macro 'caller' takes not more than " +
                        std::to_string(block->params.size()) + " argument(s)");
        }
        auto inner = std::make_shared<Scope>(closure);
        for (size_t i = 0; i < block->params.size(); ++i) {
          const size_t first_default = block->params.size() - block->defaults.size();
          if (i < args.positional.size()) {
            inner->set(block->params[i], args.positional[i]);
          } else if (i >= first_default) {
            inner->set(block->params[i], r.eval(*block->defaults[i - first_default], inner));
          } else {
            inner->set(block->params[i],
                       Value::undefined("parameter " + pystr::repr(block->params[i]) +
                                        " was not provided"));
          }
        }
        for (auto& [name, value] : args.keyword) inner->set(name, value);
        return Value(r.render_to_string(block->body, inner));
      }}));
  const Expr& call = *s.expr;
  const Value callee = eval(*call.target, scope);
  CallArgs args;
  eval_args(call, scope, args);
  args.keyword.emplace_back("caller", caller);
  const Value result = this->call(callee, args);
  emit(to_str(result));
}

Value Renderer::lookup(const std::string& name, const Scope& scope) {
  if (const Value* v = scope.find(name)) return *v;
  if (const Value* v = vars_.find(std::string_view(name))) return *v;
  if (auto g = builtin_global(name)) return *g;
  return Value::undefined(pystr::repr(name) + " is undefined");
}

Value Renderer::call(const Value& callee, CallArgs& args) {
  step();
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw_runtime("'" + type_name(callee) + "' object is not callable");
  return callee.callable().call(*this, args);
}

void Renderer::eval_args(const Expr& e, const std::shared_ptr<Scope>& scope, CallArgs& args) {
  args.positional.reserve(e.items.size());
  for (const auto& item : e.items) args.positional.push_back(eval(*item, scope));
  for (const auto& [name, value] : e.kwargs) args.keyword.emplace_back(name, eval(*value, scope));
}

Value Renderer::eval_slice(const Value& obj, const Expr& slice,
                           const std::shared_ptr<Scope>& scope) {
  Value bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (slice.items[k]) bounds[k] = eval(*slice.items[k], scope);
  }
  if (obj.is_undefined()) fail_undefined(obj);
  for (const Value& b : bounds) {
    if (!b.is_undefined() && !b.is_none() && !b.is_integral()) {
      throw_runtime("slice indices must be integers or None or have an __index__ method");
    }
  }
  if (!obj.is_list() && !obj.is_string()) {
    return Value::undefined(object_type_repr(obj) + " has no element slice(...)");
  }
  auto given = [](const Value& b) { return !b.is_undefined() && !b.is_none(); };
  const int64_t step = given(bounds[2]) ? bounds[2].to_int() : 1;
  if (step == 0) throw_runtime("slice step cannot be zero");
  const int64_t n = py_len(obj);
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](const Value& b, int64_t dflt) {
    if (!given(b)) return dflt;
    int64_t i = b.to_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = adjust(bounds[0], step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(bounds[1], step < 0 ? -1 : n);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    picks.push_back(static_cast<size_t>(i));
  }
  if (obj.is_list()) {
    std::vector<Value> items;
    items.reserve(picks.size());
    for (size_t i : picks) items.push_back(obj.list().items[i]);
    return make_list(std::move(items), obj.list().is_tuple);
  }
  const std::u32string cps = pystr::decode(obj.str());
  std::u32string out;
  out.reserve(picks.size());
  for (size_t i : picks) out.push_back(cps[i]);
  return make_string(pystr::encode(out));
}

Value Renderer::eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  // Python chains comparisons: a < b < c is (a < b) and (b < c).
  Value left = eval(*e.target, scope);
  for (const auto& [op, right_expr] : e.comparisons) {
    Value right = eval(*right_expr, scope);
    bool result = false;
    switch (op) {
      case CompareOp::eq: result = py_equal(left, right); break;
      case CompareOp::ne: result = !py_equal(left, right); break;
      case CompareOp::lt:
      case CompareOp::le:
      case CompareOp::gt:
      case CompareOp::ge: result = ordered(op, left, right); break;
      case CompareOp::in: result = contains(right, left); break;
      case CompareOp::not_in: result = !contains(right, left); break;
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Renderer::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  step();
  current_line_ = e.line;
  switch (e.kind) {
    case ExprKind::constant: return e.value;
    case ExprKind::name: return lookup(e.name, *scope);
    case ExprKind::list:
    case ExprKind::tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item, scope));
      return make_list(std::move(items), e.kind == ExprKind::tuple);
    }
    case ExprKind::dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value key = eval(*e.items[i], scope);
        if (key.is_list() && !key.list().is_tuple) throw_runtime("unhashable type: 'list'");
        if (key.is_dict()) throw_runtime("unhashable type: 'dict'");
        d.set(std::move(key), eval(*e.items[i + 1], scope));
      }
      charge(d.size() * 2 * sizeof(Value));
      return Value(std::move(d));
    }
    case ExprKind::getattr: {
      const Value obj = eval(*e.target, scope);
      current_line_ = e.line;
      return getattr(obj, e.name);
    }
    case ExprKind::getitem: {
      const Value obj = eval(*e.target, scope);
      if (e.other->kind == ExprKind::slice) return eval_slice(obj, *e.other, scope);
      const Value key = eval(*e.other, scope);
      current_line_ = e.line;
      return getitem(obj, key);
    }
    case ExprKind::slice: throw_runtime("slice outside a subscript");
    case ExprKind::call: {
      const Value callee = eval(*e.target, scope);
      CallArgs args;
      eval_args(e, scope, args);
      current_line_ = e.line;
      return call(callee, args);
    }
    case ExprKind::filter: {
      const Value input = e.target ? eval(*e.target, scope) : Value();
      CallArgs args;
      eval_args(e, scope, args);
      current_line_ = e.line;
      return e.filter(*this, input, args);
    }
    case ExprKind::test: {
      const Value input = eval(*e.target, scope);
      CallArgs args;
      eval_args(e, scope, args);
      current_line_ = e.line;
      return Value(e.test(*this, input, args));
    }
    case ExprKind::negate:
    case ExprKind::plus: {
      const Value v = eval(*e.target, scope);
      if (v.is_undefined()) fail_undefined(v);
      if (e.kind == ExprKind::plus) {
        if (!v.is_number()) throw_runtime("bad operand type for unary +: '" + type_name(v) + "'");
        return v.is_bool() ? Value(v.to_int()) : v;
      }
      if (v.is_integral()) {
        if (v.to_int() == INT64_MIN) throw_runtime("integer overflow");
        return Value(-v.to_int());
      }
      if (v.is_float()) return Value(-v.as_float());
      throw_runtime("bad operand type for unary -: '" + type_name(v) + "'");
    }
    case ExprKind::logical_not: return Value(!truthy(eval(*e.target, scope)));
    case ExprKind::binary: {
      const Value a = eval(*e.target, scope);
      const Value b = eval(*e.other, scope);
      current_line_ = e.line;
      return binary(e.binary_op, a, b);
    }
    case ExprKind::logical_and: {
      Value a = eval(*e.target, scope);
      if (!truthy(a)) return a;
      return eval(*e.other, scope);
    }
    case ExprKind::logical_or: {
      Value a = eval(*e.target, scope);
      if (truthy(a)) return a;
      return eval(*e.other, scope);
    }
    case ExprKind::concat: {
      std::string out;
      for (const auto& item : e.items) out += to_str(eval(*item, scope));
      return make_string(std::move(out));
    }
    case ExprKind::compare: return eval_compare(e, scope);
    case ExprKind::condition: {
      if (truthy(eval(*e.other, scope))) return eval(*e.target, scope);
      if (e.third) return eval(*e.third, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  throw_runtime("unknown expression");
}

}  // namespace vpod::tokenizer::jinja
