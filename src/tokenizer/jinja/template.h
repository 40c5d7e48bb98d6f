// A Jinja2 template engine for chat templates, byte-compatible with Python
// jinja2 as Hugging Face configures it (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loop controls, tojson with ensure_ascii=False,
// raise_exception, strftime_now). Parse once, render many times; a Template
// is immutable and may be rendered from several threads at once.
//
// Not supported (fails at parse time, naming the construct and line):
// template inheritance and inclusion (extends, block, include, import),
// recursive loops, *args/**kwargs in calls, and the filters format, groupby,
// pprint, random, slice, striptags, truncate, urlencode, urlize, wordwrap,
// xmlattr, filesizeformat. Known differences from Python jinja2: integers
// are 64-bit (overflow is an error, not a big integer); upper/lower use
// simple (1:1) Unicode case mapping; `safe` strings are not Markup objects;
// filters that return generators in jinja2 (map, select, ...) return lists,
// which only shows if a template prints one directly.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "tokenizer/jinja/renderer.h"

namespace vpod::tokenizer::jinja {

struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
  size_t max_template_bytes = size_t{4} << 20;
  int max_nesting_depth = 96;
};

struct RenderOptions {
  RenderLimits limits;
  // The time strftime_now() formats; the clock when unset (tests fix it).
  std::optional<std::time_t> now;
};

class Template {
 public:
  // Errors: invalid_argument for syntax errors, unimplemented for jinja2
  // constructs this engine lacks, out_of_range for templates over the
  // limits; messages read "line N: ...".
  static Result<Template> parse(std::string_view source, const TemplateOptions& options = {});

  // `variables` must be a JSON object; its members are the template's
  // variables. It is an ordered_json because key order is visible to
  // templates (tojson of a tool schema, iterating a dict) and Python keeps it. Errors:
  // invalid_argument with the template's message for raise_exception(), invalid_argument "line N:
  // ..." for runtime errors (undefined attribute use, type errors) and for the render's limits,
  // unavailable when the budget shared with concurrent renders is used up. Messages are cut to
  // about 1 KiB.
  Result<std::string> render(const nlohmann::ordered_json& variables,
                             const RenderOptions& options = {}) const;

  // vLLM's content-format detection: true when some `for` loop iterates over
  // the `content` of a message (`for part in message['content']`), where the
  // message comes from a loop over `messages` (or a variable assigned from
  // it). Such templates take content as a list of parts; others a string.
  bool iterates_message_content() const;

 private:
  explicit Template(std::shared_ptr<const StmtList> body) : body_(std::move(body)) {}
  std::shared_ptr<const StmtList> body_;
};

}  // namespace vpod::tokenizer::jinja
