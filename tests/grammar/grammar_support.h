// Shared by tests/grammar: the Llama-3 tokenizer fixture and a compiler over
// it (built once per process: the vocabulary takes about a second), with an
// LM head 64 rows larger than the tokenizer (those ids are never allowed).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace vpod::grammar::testing {

inline constexpr int kExtraHeadRows = 64;

inline std::filesystem::path llama3_dir() {
  return std::filesystem::path(VPOD_FIXTURES_DIR) / "tokenizers" / "llama3";
}

inline std::shared_ptr<const tokenizer::Tokenizer> llama3_tokenizer() {
  static std::shared_ptr<const tokenizer::Tokenizer> tok = [] {
    std::shared_ptr<const tokenizer::Tokenizer> t;
    if (!std::filesystem::exists(llama3_dir() / "tokenizer.json")) return t;
    auto loaded = tokenizer::Tokenizer::from_file(llama3_dir());
    if (loaded.ok()) t = std::make_shared<const tokenizer::Tokenizer>(std::move(loaded).value());
    return t;
  }();
  return tok;
}

inline VocabularySource llama3_source() {
  auto tok = llama3_tokenizer();
  VocabularySource s;
  s.tokenizer = tok;
  s.tokenizer_json = llama3_dir() / "tokenizer.json";
  s.vocab_size = static_cast<int>(tok->vocab_size()) + kExtraHeadRows;
  s.stop_token_ids = {tok->token_to_id("<|eot_id|>"), tok->token_to_id("<|end_of_text|>")};
  return s;
}

// One compiler for the whole test binary.
inline GrammarCompiler& llama3_compiler() {
  static GrammarCompiler compiler(llama3_source());
  return compiler;
}

#define VPOD_REQUIRE_LLAMA3()                                                                  \
  do {                                                                                         \
    if (!::vpod::grammar::testing::llama3_tokenizer()) {                                       \
      GTEST_SKIP() << "tokenizer fixture missing: " << ::vpod::grammar::testing::llama3_dir(); \
    }                                                                                          \
  } while (false)

}  // namespace vpod::grammar::testing
