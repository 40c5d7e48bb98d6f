// `vpod bench <name>` programs. Each benchmark lives in bench/<name>_bench.cpp
// (or .cu), validates against a reference first, then prints a table on
// stdout and writes JSON with --json FILE.
#pragma once

#include <CLI/CLI.hpp>

namespace vpod::attention {
struct KernelOptions;
}  // namespace vpod::attention

namespace vpod::bench {

void add_serve_bench(CLI::App& bench);      // bench/serve_bench.cpp
void add_attention_bench(CLI::App& bench);  // bench/attention_bench.cpp
void add_model_bench(CLI::App& bench);      // bench/model_bench.cpp
void add_kvcache_bench(CLI::App& bench);    // bench/kvcache_bench.cpp
void add_tokenizer_bench(CLI::App& bench);  // bench/tokenizer_bench.cpp
void add_offline_bench(CLI::App& bench);    // bench/offline_bench.cpp
void add_pod_bench(CLI::App& bench);        // bench/pod_bench.cpp
void add_grammar_bench(CLI::App& bench);    // bench/grammar_bench.cpp

// The attention launchers' switches (attention::KernelOptions; defaults: the
// engine's fast paths) as flags of `cmd`: --mma-prefill, --no-tma,
// --decode-combine-kernel, --no-lazy-rescale, ... `options`
// must outlive the parse (bench/attention_bench.cpp; also `vpod bench pod`).
void add_kernel_option_flags(CLI::App& cmd, attention::KernelOptions& options);

}  // namespace vpod::bench
