// The Jinja template API (template.h): parse once, render with JSON variables,
// and the errors located at the template's line.

#include "tokenizer/jinja/template.h"

#include <deque>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "tokenizer/jinja/parser.h"

namespace vpod::tokenizer::jinja {

namespace {

// Error messages reach clients and logs; a template may raise one of any
// size (raise_exception("x" * 50_000_000)), so they are cut to this.
constexpr size_t kMaxMessageBytes = 1024;

std::string bounded(const std::string& message) {
  if (message.size() <= kMaxMessageBytes) return message;
  size_t cut = kMaxMessageBytes;
  // Back off to a UTF-8 character boundary.
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return message.substr(0, cut) + "... (" + std::to_string(message.size()) + " bytes)";
}

std::string located(const Error& e, std::string_view what) {
  std::string out(what);
  if (e.line > 0) out += " at line " + std::to_string(e.line);
  return out + ": " + bounded(e.message);
}

// ---- vLLM's content-format detection over the AST ----------------------------

// `name` loaded as a variable.
bool is_var(const Expr* e, std::string_view name) {
  return e && e->kind == ExprKind::name && e->name == name;
}

// var.key or var['key'].
bool is_attr_access(const Expr* e, std::string_view var, std::string_view key) {
  if (!e) return false;
  if (e->kind == ExprKind::getattr) return is_var(e->target.get(), var) && e->name == key;
  if (e->kind == ExprKind::getitem) {
    return is_var(e->target.get(), var) && e->other->kind == ExprKind::constant &&
           e->other->value.is_string() && e->other->value.str() == key;
  }
  return false;
}

// The variable (or its `key` element), possibly through filters, tests and
// slices: `messages`, `messages[1:]`, `message.content | list`.
bool is_var_or_elems_access(const Expr* e, std::string_view var, std::string_view key) {
  if (!e) return false;
  if (e->kind == ExprKind::filter || e->kind == ExprKind::test) {
    return is_var_or_elems_access(e->target.get(), var, key);
  }
  if (e->kind == ExprKind::getitem && e->other->kind == ExprKind::slice) {
    return is_var_or_elems_access(e->target.get(), var, key);
  }
  return key.empty() ? is_var(e, var) : is_attr_access(e, var, key);
}

void for_each_stmt(const StmtList& body, const std::function<void(const Stmt&)>& visit) {
  for (const auto& s : body) {
    visit(*s);
    for_each_stmt(s->body, visit);
    for_each_stmt(s->else_body, visit);
    for (const auto& [condition, branch] : s->branches) for_each_stmt(branch, visit);
  }
}

}  // namespace

Result<Template> Template::parse(std::string_view source, const TemplateOptions& options) {
  if (source.size() > options.max_template_bytes) {
    return out_of_range("template is " + std::to_string(source.size()) + " bytes, over the " +
                        std::to_string(options.max_template_bytes) + "-byte limit");
  }
  if (const size_t valid = utf8::valid_prefix_length(source); valid != source.size()) {
    return invalid_argument("template is not valid UTF-8 (at byte " + std::to_string(valid) + ")");
  }
  ParseOptions parse_options;
  parse_options.lexer.trim_blocks = options.trim_blocks;
  parse_options.lexer.lstrip_blocks = options.lstrip_blocks;
  parse_options.lexer.keep_trailing_newline = options.keep_trailing_newline;
  parse_options.max_nesting_depth = options.max_nesting_depth;
  try {
    auto body = std::make_shared<const StmtList>(parse_template(source, parse_options));
    return Template(std::move(body));
  } catch (const Error& e) {
    switch (e.kind) {
      case Error::Kind::unsupported:
        return unimplemented(located(e, "unsupported template construct"));
      case Error::Kind::limit: return out_of_range(located(e, "template too complex"));
      default: return invalid_argument(located(e, "template syntax error"));
    }
  }
}

Result<std::string> Template::render(const nlohmann::ordered_json& variables,
                                     const RenderOptions& options) const {
  if (!variables.is_object()) return invalid_argument("template variables must be a JSON object");
  try {
    const Value vars = from_json(variables);
    Renderer renderer(vars.dict(), options.limits, options.now);
    return renderer.render(*body_);
  } catch (const Error& e) {
    // A template's limits are the request's fault (400, not retryable); a
    // message is cut to a size a client and a log can take.
    switch (e.kind) {
      case Error::Kind::raised: return invalid_argument(bounded(e.message));
      case Error::Kind::limit: return invalid_argument(located(e, "template rendering stopped"));
      case Error::Kind::busy: return unavailable(e.message);
      case Error::Kind::unsupported:
        return unimplemented(located(e, "unsupported template construct"));
      default: return invalid_argument(located(e, "template error"));
    }
  } catch (const std::bad_alloc&) {
    return resource_exhausted("template rendering ran out of memory");
  }
}

bool Template::iterates_message_content() const {
  // Variables holding the messages: `messages` and anything assigned from
  // it, transitively (vLLM's breadth-first search over Assign nodes).
  std::vector<std::string> messages_vars = {"messages"};
  std::deque<std::string> pending = {"messages"};
  while (!pending.empty()) {
    const std::string var = pending.front();
    pending.pop_front();
    for_each_stmt(*body_, [&](const Stmt& s) {
      if (s.kind != StmtKind::set || s.target.kind != Target::Kind::name) return;
      if (!is_var_or_elems_access(s.expr.get(), var, "")) return;
      messages_vars.push_back(s.target.name);
      if (s.target.name != var && messages_vars.size() < 1000) pending.push_back(s.target.name);
    });
  }
  // Loop variables over the messages: `for message in messages`.
  std::vector<std::string> message_vars;
  for_each_stmt(*body_, [&](const Stmt& s) {
    if (s.kind != StmtKind::for_ || s.target.kind != Target::Kind::name) return;
    for (const auto& var : messages_vars) {
      if (is_var_or_elems_access(s.expr.get(), var, "")) {
        message_vars.push_back(s.target.name);
        break;
      }
    }
  });
  // A loop over one message's content.
  bool found = false;
  for_each_stmt(*body_, [&](const Stmt& s) {
    if (s.kind != StmtKind::for_) return;
    for (const auto& var : message_vars) {
      found |= is_var_or_elems_access(s.expr.get(), var, "content");
    }
  });
  return found;
}

}  // namespace vpod::tokenizer::jinja
