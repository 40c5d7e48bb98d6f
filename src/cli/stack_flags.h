// The engine stack's flags, shared by `vpod serve`, `vpod generate` and
// `vpod bench offline`: each is parsed once, straight into the typed
// engine::StackOptions (enums, sizes, on/off), with one error message per
// bad value.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <optional>
#include <string>

#include "engine/engine_stack.h"

namespace vpod::cli {

// --device --dtype --attention --cpu-threads --tensor-parallel-size --nnodes --node-rank
// --master-addr --master-port --max-model-len --max-num-seqs
// --max-num-batched-tokens --kv-cache --kv-layout --kv-eager-allocation
// --enable-prefix-caching / --no-enable-prefix-caching --gpu-memory-utilization --kv-cache-memory
// --async-scheduling. `options` holds the defaults and must outlive the parse. (--model and --seed
// mean different things per command; each command adds its own.)
void add_stack_flags(CLI::App& cmd, engine::StackOptions& options);

// "4GiB", "512MiB", "64KiB", "2GB", "1000000" -> bytes; nullopt when not a
// positive size.
std::optional<std::size_t> parse_size(const std::string& text);

}  // namespace vpod::cli
