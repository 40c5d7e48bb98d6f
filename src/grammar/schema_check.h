// JSON Schema features xgrammar cannot enforce. xgrammar drops them with a
// warning and generates from the rest of the schema, so an output could then
// break the schema; vpod refuses such a schema instead (a 400 naming the
// keyword and where it is), so a constrained answer always obeys its schema.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace vpod::grammar {

// invalid_argument naming the first unsupported keyword and its JSON pointer,
// e.g. "unsupported JSON Schema keyword 'uniqueItems' at /properties/tags".
Status check_schema_supported(const nlohmann::json& schema);

}  // namespace vpod::grammar
