// `vpod tokenize --tokenizer DIR [--add-special-tokens] [--decode]`: one JSON
// value per line on stdin, one per line on stdout (a string becomes an array
// of ids; with --decode an array of ids becomes a string). A bad line gets
// {"error": "..."} on its output line and makes the exit code 1.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "tokenizer/tokenize_lines.h"
#include "tokenizer/tokenizer.h"

namespace vpod::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer_path;
  tokenizer::TokenizeLineOptions options;
};

void run_tokenize(const TokenizeArgs& args) {
  auto loaded = tokenizer::Tokenizer::from_file(args.tokenizer_path);
  if (!loaded.ok()) {
    fmt::print(stderr, "vpod tokenize: {}\n", loaded.status().to_string());
    throw CLI::RuntimeError(2);
  }
  const tokenizer::Tokenizer& tok = *loaded;
  std::ios::sync_with_stdio(false);
  bool failed = false;
  std::string line;
  std::string out;
  std::size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto answer = tokenizer::process_tokenize_line(tok, line, args.options);
    if (answer.ok()) {
      out = std::move(answer).value();
    } else {
      failed = true;
      fmt::print(stderr, "vpod tokenize: line {}: {}\n", line_number, answer.status().message());
      out = nlohmann::json{{"error", answer.status().message()}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    out += '\n';
    std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
  }
  std::cout.flush();
  if (failed) throw CLI::RuntimeError(1);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode JSON strings (one per line on stdin) to id arrays, or decode id arrays with "
      "--decode");
  cmd->add_option("--tokenizer", args->tokenizer_path,
                  "tokenizer.json, or a model directory holding one")
      ->required();
  cmd->add_flag("--add-special-tokens", args->options.add_special_tokens,
                "apply the tokenizer's post-processor template (e.g. BOS)");
  cmd->add_flag("--decode", args->options.decode, "decode id arrays into strings");
  cmd->add_flag("--skip-special-tokens", args->options.skip_special_tokens,
                "with --decode: leave special tokens out of the text");
  cmd->callback([args] { run_tokenize(*args); });
}

}  // namespace vpod::cli
