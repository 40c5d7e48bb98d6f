// The `vpod` binary: parses the command line and runs one subcommand.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "common/log.h"

int main(int argc, char** argv) {
  CLI::App app{
      "vpod: an LLM serving engine with a virtually contiguous KV cache (vAttention) "
      "and fused prefill+decode attention (POD-Attention)"};
  app.name("vpod");
  app.set_version_flag("--version", "vpod 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  // --log-level after the subcommand (`vpod serve --log-level debug ...`, as
  // vLLM takes it) wins over one before it.
  std::string subcommand_log_level;
  app.require_subcommand(1);
  app.parse_complete_callback([&] {
    const std::string& level = subcommand_log_level.empty() ? log_level : subcommand_log_level;
    if (!vpod::configure_logging(level)) {
      throw CLI::ValidationError("--log-level", "unknown level '" + level + "'");
    }
  });

  vpod::cli::add_info_command(app);
  vpod::cli::add_tokenize_command(app);
  vpod::cli::add_bench_command(app);
  vpod::cli::add_make_model_command(app);
  vpod::cli::add_generate_command(app);
  vpod::cli::add_serve_command(app);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->add_option("--log-level", subcommand_log_level, "trace, debug, info, warn, error or off");
  }

  if (argc <= 1) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
