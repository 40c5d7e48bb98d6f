// `vpod bench`: the parent of every benchmark subcommand (see bench/benches.h).
#include "bench/benches.h"
#include "cli/commands.h"

namespace vpod::cli {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: validate, then time and report");
  bench->require_subcommand(1);
  // One line per benchmark: bench::add_<name>_bench(*bench);
  bench::add_tokenizer_bench(*bench);
  bench::add_serve_bench(*bench);
  bench::add_attention_bench(*bench);
  bench::add_model_bench(*bench);
  bench::add_kvcache_bench(*bench);
  bench::add_offline_bench(*bench);
  bench::add_pod_bench(*bench);
  bench::add_grammar_bench(*bench);
}

}  // namespace vpod::cli
