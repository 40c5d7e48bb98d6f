// The renderer's Python value semantics, shared with the builtins:
// attribute and item access (getattr, getitem), `in`, and the binary
// operators with Python's integer, float and sequence rules.
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/renderer.h"

namespace vpod::tokenizer::jinja {

namespace {

std::string undefined_attr_message(const Value& obj, std::string_view name) {
  return pystr::repr(object_type_repr(obj)) + " has no attribute " + pystr::repr(name);
}

std::string undefined_item_message(const Value& obj, const Value& key) {
  if (key.is_string()) return undefined_attr_message(obj, key.str());
  return object_type_repr(obj) + " has no element " + to_repr(key);
}

[[noreturn]] void fail_operands(std::string_view op, const Value& a, const Value& b) {
  throw_runtime("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) +
                "' and '" + type_name(b) + "'");
}

[[noreturn]] void fail_overflow() {
  throw_runtime("integer overflow (Python would use a big integer)");
}

// Python's floor division and modulo on integers.
int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw_runtime("integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) fail_overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw_runtime("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

double py_fmod(double a, double b) {
  if (b == 0.0) throw_runtime("float modulo");
  double m = std::fmod(a, b);
  if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
  if (m == 0.0) m = std::copysign(0.0, b);
  return m;
}

}  // namespace

Value Renderer::getattr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    // Python's getattr finds dict methods (items, get, ...) before keys.
    if (auto m = builtin_method(obj, name)) return *m;
    if (const Value* v = obj.dict().find(name)) return *v;
    return Value::undefined(undefined_attr_message(obj, name));
  }
  if (obj.is_object()) {
    if (auto v = obj.object().get_attr(name)) return *v;
    return Value::undefined(undefined_attr_message(obj, name));
  }
  if (auto m = builtin_method(obj, name)) return *m;
  return Value::undefined(undefined_attr_message(obj, name));
}

Value Renderer::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(key)) return *v;
    if (key.is_string()) {
      if (auto m = builtin_method(obj, key.str())) return *m;
    }
    return Value::undefined(undefined_item_message(obj, key));
  }
  if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    const int64_t n = py_len(obj);
    int64_t i = key.to_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(undefined_item_message(obj, key));
    if (obj.is_list()) return obj.list().items[static_cast<size_t>(i)];
    const std::u32string cps = pystr::decode(obj.str());
    return Value(pystr::encode(std::u32string_view(cps).substr(static_cast<size_t>(i), 1)));
  }
  if (key.is_string()) return getattr(obj, key.str());
  return Value::undefined(undefined_item_message(obj, key));
}

bool Renderer::contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (item.is_undefined()) fail_undefined(item);
    if (!item.is_string()) {
      throw_runtime("'in <string>' requires string as left operand, not " + type_name(item));
    }
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& v : container.list().items) {
      if (py_equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return container.dict().find(item) != nullptr;
  throw_runtime("argument of type '" + type_name(container) + "' is not iterable");
}

Value Renderer::binary(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinaryOp::add: {
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.to_int(), b.to_int(), &r)) fail_overflow();
        return Value(r);
      }
      if (nums) return Value(a.to_double() + b.to_double());
      if (a.is_string() && b.is_string()) return make_string(a.str() + b.str());
      if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return make_list(std::move(items), a.list().is_tuple);
      }
      if (a.is_string()) {
        throw_runtime("can only concatenate str (not \"" + type_name(b) + "\") to str");
      }
      if (a.is_list() && !a.list().is_tuple) {
        throw_runtime("can only concatenate list (not \"" + type_name(b) + "\") to list");
      }
      fail_operands("+", a, b);
    }
    case BinaryOp::sub: {
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) fail_overflow();
        return Value(r);
      }
      if (nums) return Value(a.to_double() - b.to_double());
      fail_operands("-", a, b);
    }
    case BinaryOp::mul: {
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) fail_overflow();
        return Value(r);
      }
      if (nums) return Value(a.to_double() * b.to_double());
      // Sequence repetition: str * int, int * str, list * int.
      const Value& seq = a.is_integral() ? b : a;
      const Value& count = a.is_integral() ? a : b;
      if (count.is_integral() && (seq.is_string() || seq.is_list())) {
        const int64_t n = std::max<int64_t>(0, count.to_int());
        if (seq.is_string()) {
          const size_t total = seq.str().size() * static_cast<size_t>(n);
          if (n > 0 && total / static_cast<size_t>(n) != seq.str().size()) charge(SIZE_MAX);
          charge(total);
          std::string out;
          out.reserve(total);
          for (int64_t i = 0; i < n; ++i) out += seq.str();
          return Value(std::move(out));
        }
        const size_t total = seq.list().items.size() * static_cast<size_t>(n);
        charge(total * sizeof(Value));
        std::vector<Value> items;
        items.reserve(total);
        for (int64_t i = 0; i < n; ++i) {
          items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
        }
        return Value(List{std::move(items), seq.list().is_tuple});
      }
      fail_operands("*", a, b);
    }
    case BinaryOp::div: {
      if (!nums) fail_operands("/", a, b);
      if (b.to_double() == 0.0) throw_runtime("division by zero");
      return Value(a.to_double() / b.to_double());
    }
    case BinaryOp::floordiv: {
      if (ints) return Value(floor_div(a.to_int(), b.to_int()));
      if (!nums) fail_operands("//", a, b);
      if (b.to_double() == 0.0) throw_runtime("float floor division by zero");
      const double x = a.to_double();
      const double y = b.to_double();
      return Value((x - py_fmod(x, y)) / y);
    }
    case BinaryOp::mod: {
      if (ints) return Value(py_mod(a.to_int(), b.to_int()));
      if (nums) return Value(py_fmod(a.to_double(), b.to_double()));
      if (a.is_string()) {
        throw_error(Error::Kind::unsupported,
                    "printf-style string formatting (%) is not supported");
      }
      fail_operands("%", a, b);
    }
    case BinaryOp::pow: {
      if (ints && b.to_int() >= 0) {
        int64_t result = 1;
        int64_t base = a.to_int();
        int64_t e = b.to_int();
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result)) fail_overflow();
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail_overflow();
        }
        return Value(result);
      }
      if (!nums) fail_operands("** or pow()", a, b);
      if (a.to_double() == 0.0 && b.to_double() < 0) {
        throw_runtime("0.0 cannot be raised to a negative power");
      }
      return Value(std::pow(a.to_double(), b.to_double()));
    }
  }
  throw_runtime("unknown operator");
}

}  // namespace vpod::tokenizer::jinja
