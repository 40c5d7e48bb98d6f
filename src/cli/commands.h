// Each `vpod` subcommand lives in its own file and adds itself to the root
// app here. A command's callback prints its own errors and throws
// CLI::RuntimeError(exit_code) to fail; main() turns that into the exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace vpod::cli {

void add_info_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace vpod::cli
