// What vLLM's serve flags --chat-template and --generation-config resolve to:
// the chat template's text (a file's, or the template given inline) and the
// default sampling parameters (the engine's, or a generation_config.json's
// sampling fields over them). Pure functions of the flag and the files.
#pragma once

#include <filesystem>
#include <string>

#include "common/status.h"
#include "engine/request.h"

namespace vpod::server {

// --chat-template VALUE: an existing file is read; otherwise a value holding
// any of '{', '}' or a newline is the template itself (vLLM's rule); anything
// else is an error saying the file does not exist.
Result<std::string> resolve_chat_template(const std::string& value);

// --generation-config: "auto" reads `model_dir`/generation_config.json (when
// there is one), a folder reads its generation_config.json (which must
// exist), "vllm" reads nothing. The engine's defaults, with the file's
// temperature, top_p, top_k, min_p and repetition_penalty over them. As in
// vLLM (transformers' to_diff_dict), a field at transformers' own default
// (temperature 1, top_p 1, top_k 50, repetition_penalty 1) is not taken.
// `taken` (optional) gets "name=value, ..." of the fields taken.
Result<engine::SamplingParams> default_sampling_params(const std::string& generation_config,
                                                       const std::filesystem::path& model_dir,
                                                       std::string* taken = nullptr);

}  // namespace vpod::server
