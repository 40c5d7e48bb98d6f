// Values of the Jinja engine, with Python's semantics (jinja2 runs on Python:
// `{{ x }}` prints str(x), `==` is Python equality, `and`/`or` return an operand).
// Lists and dicts are immutable once built, as in jinja2's
// ImmutableSandboxedEnvironment that Hugging Face renders chat templates with;
// the only mutable things are namespace() objects and loop objects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vpod::tokenizer::jinja {

class Value;
class Renderer;
struct CallArgs;

// An error raised while parsing or rendering; the public API turns it into a
// Status (template.cpp). `line` is the template line, 0 when unknown.
struct Error {
  enum class Kind {
    syntax,       // the template text cannot be parsed
    runtime,      // a Python-level error: undefined use, TypeError, ...
    raised,       // the template called raise_exception(message)
    limit,        // a resource limit (output size, steps, depth) was hit
    busy,         // the memory budget shared with concurrent renders is used up
    unsupported,  // a construct jinja2 has that this engine does not
  };
  Kind kind;
  std::string message;
  int line = 0;
};

[[noreturn]] void throw_error(Error::Kind kind, std::string message, int line = 0);
[[noreturn]] inline void throw_runtime(std::string message) {
  throw_error(Error::Kind::runtime, std::move(message));
}

// jinja2's default Undefined: falsy, prints as "", iterates as empty, and
// raises its message when used any other way (attribute, arithmetic, call).
struct Undefined {
  std::shared_ptr<const std::string> message;  // e.g. "'dict object' has no attribute 'content'"
};
struct None {};

struct List;
class Dict;
class Object;
struct Callable;

class Value {
 public:
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using CallablePtr = std::shared_ptr<const Callable>;
  using ObjectPtr = std::shared_ptr<Object>;

  Value() : data_(Undefined{}) {}
  Value(None) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int v) : data_(int64_t{v}) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(std::string s) : data_(std::make_shared<const std::string>(std::move(s))) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(StringPtr s) : data_(std::move(s)) {}
  Value(List l);
  Value(ListPtr l) : data_(std::move(l)) {}
  Value(Dict d);
  Value(DictPtr d) : data_(std::move(d)) {}
  Value(CallablePtr c) : data_(std::move(c)) {}
  Value(ObjectPtr o) : data_(std::move(o)) {}
  Value(Undefined u) : data_(std::move(u)) {}

  static Value undefined(std::string message);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<None>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python numbers.Number
  bool is_integral() const { return is_int() || is_bool(); }  // Python int (bool is one)
  bool is_string() const { return std::holds_alternative<StringPtr>(data_); }
  bool is_list() const { return std::holds_alternative<ListPtr>(data_); }  // list or tuple
  bool is_dict() const { return std::holds_alternative<DictPtr>(data_); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(data_); }
  bool is_object() const { return std::holds_alternative<ObjectPtr>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  const std::string& str() const { return *std::get<StringPtr>(data_); }
  const StringPtr& str_ptr() const { return std::get<StringPtr>(data_); }
  const List& list() const { return *std::get<ListPtr>(data_); }
  const Dict& dict() const { return *std::get<DictPtr>(data_); }
  const Callable& callable() const { return *std::get<CallablePtr>(data_); }
  Object& object() const { return *std::get<ObjectPtr>(data_); }
  const ObjectPtr& object_ptr() const { return std::get<ObjectPtr>(data_); }
  const std::string& undefined_message() const;

  // Python's numeric view of int, float and bool (bool is an int subclass).
  double to_double() const;
  // int or bool as int64 (callers check is_int() || is_bool()).
  int64_t to_int() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }

 private:
  std::variant<Undefined, None, bool, int64_t, double, StringPtr, ListPtr, DictPtr, CallablePtr,
               ObjectPtr>
      data_;
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;  // prints as (a, b) instead of [a, b]
};

// A Python dict: insertion-ordered, keys compared with Python equality.
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces an existing key in place
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> string_index_;  // string key -> position in entries_
};

// Something with attributes: namespace(), the `loop` variable.
class Object {
 public:
  virtual ~Object() = default;
  // Python-qualified class name, for error messages ("jinja2.utils.Namespace").
  virtual std::string_view class_name() const = 0;
  virtual std::optional<Value> get_attr(std::string_view name) const = 0;
  // False when the object does not allow assignment (only namespaces do).
  virtual bool set_attr(std::string_view name, Value value);
  virtual std::string repr(int depth) const = 0;
  virtual bool truthy() const { return true; }
  // Python's len(), when the class defines __len__.
  virtual std::optional<int64_t> length() const { return std::nullopt; }
  // Drops the values this object holds. Called when a render ends, so that
  // reference cycles (a namespace holding itself) are not leaked.
  virtual void release() {}
};

// jinja2's namespace(): the one object whose attributes `set ns.x = ...`
// may assign, so values can escape a loop body's scope.
class Namespace : public Object {
 public:
  explicit Namespace(Dict attrs) : attrs_(std::move(attrs)) {}
  std::string_view class_name() const override { return "jinja2.utils.Namespace"; }
  std::optional<Value> get_attr(std::string_view name) const override;
  bool set_attr(std::string_view name, Value value) override;
  std::string repr(int depth) const override;
  void release() override;

 private:
  Dict attrs_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function a template can call: a global (range, namespace, raise_exception),
// a bound method ('a'.upper), a macro, loop.cycle.
struct Callable {
  std::string name;
  std::function<Value(Renderer&, CallArgs&)> call;
};

inline Value::Value(List l) : data_(std::make_shared<const List>(std::move(l))) {}
inline Value::Value(Dict d) : data_(std::make_shared<const Dict>(std::move(d))) {}
inline Value Value::list(std::vector<Value> items) { return Value(List{std::move(items), false}); }
inline Value Value::tuple(std::vector<Value> items) { return Value(List{std::move(items), true}); }

// Nesting limit for printing, comparing and serializing values; deeper values
// (or a namespace that contains itself) raise instead of exhausting the stack.
inline constexpr int kMaxValueDepth = 256;

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);                  // str(v); Undefined -> ""
std::string to_repr(const Value& v, int depth = 0);  // repr(v)
bool py_equal(const Value& a, const Value& b, int depth = 0);
// <0, 0, >0 like Python's ordering; raises TypeError for unorderable types.
int py_compare(const Value& a, const Value& b, int depth = 0);
// jinja2's object_type_repr: "dict object", "None", "jinja2.utils.Namespace object".
std::string object_type_repr(const Value& v);
// Python's type(v).__name__ ("str", "NoneType", "dict", ...).
std::string type_name(const Value& v);
// Number of items as Python's len(): code points for strings. Raises for
// values without a length.
int64_t py_len(const Value& v);
// The items a Python for loop visits: list items, dict keys, string
// characters; Undefined gives none. Raises "'int' object is not iterable".
std::vector<Value> iterate(const Value& v);

// Raises the Undefined's own message (what jinja2 does when an undefined value
// is used for anything but printing, testing, iterating or comparing).
[[noreturn]] void fail_undefined(const Value& v);

// JSON values (HTTP messages, tokenizer_config) to template values:
// objects -> dicts (keeping their key order, as Python's json does),
// arrays -> lists, integers -> int, floats -> float.
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

}  // namespace vpod::tokenizer::jinja
