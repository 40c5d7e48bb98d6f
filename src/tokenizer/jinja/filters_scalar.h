// The string and number filters that filters_scalar.cpp implements, for the
// filter table in filters.cpp; private to those two files.
#pragma once

#include "tokenizer/jinja/renderer.h"

namespace vpod::tokenizer::jinja::detail {

Value f_abs(Renderer& r, const Value& v, CallArgs& args);
Value f_capitalize(Renderer& r, const Value& v, CallArgs& args);
Value f_center(Renderer& r, const Value& v, CallArgs& args);
Value f_escape(Renderer& r, const Value& v, CallArgs& args);
Value f_float(Renderer& r, const Value& v, CallArgs& args);
Value f_int(Renderer& r, const Value& v, CallArgs& args);
Value f_indent(Renderer& r, const Value& v, CallArgs& args);
Value f_lower(Renderer& r, const Value& v, CallArgs& args);
Value f_upper(Renderer& r, const Value& v, CallArgs& args);
Value f_replace(Renderer& r, const Value& v, CallArgs& args);
Value f_round(Renderer& r, const Value& v, CallArgs& args);
Value f_safe(Renderer& r, const Value& v, CallArgs& args);
Value f_string(Renderer& r, const Value& v, CallArgs& args);
Value f_title(Renderer& r, const Value& v, CallArgs& args);
Value f_trim(Renderer& r, const Value& v, CallArgs& args);
Value f_wordcount(Renderer& r, const Value& v, CallArgs& args);

}  // namespace vpod::tokenizer::jinja::detail
