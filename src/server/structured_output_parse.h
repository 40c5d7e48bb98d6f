// Structured output in a request body: OpenAI's response_format (text,
// json_object, json_schema {name, schema, strict}, and vLLM's structural_tag),
// vLLM's structured_outputs {json, regex, choice, grammar, json_object,
// structural_tag} and its older top-level guided_json, guided_regex,
// guided_choice, guided_grammar and structural_tag, all turned into one
// grammar::Constraint; structured_outputs.disable_any_whitespace (vLLM's)
// makes a JSON constraint compact. Shape errors and more than one constraint are a 400
// naming the field; whether the spec compiles is the engine's check (also a
// 400, at submission).
#pragma once

#include <nlohmann/json.hpp>

#include "grammar/constraint.h"
#include "server/api_error.h"

namespace vpod::server {

// The request's constraint (kind none when it asks for none).
ApiResult<grammar::Constraint> parse_structured_output(const nlohmann::ordered_json& body);

}  // namespace vpod::server
