// Compiles a request's Constraint (constraint.h) into a CompiledGrammar for
// the served model's vocabulary, through xgrammar, and caches the result
// (grammar_cache.h). The vocabulary (xgrammar's TokenizerInfo: every token's
// bytes, the vocabulary's encoding, the model's vocab size and EOS ids) is
// built once, at the first compile, so serving without structured output
// pays nothing. Thread-safe: requests compile on their submitting thread
// (the HTTP handler), never on the engine thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "grammar/constraint.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"

namespace vpod::tokenizer {
class Tokenizer;
}

namespace vpod::grammar {

struct VocabularySource {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  // The model folder's tokenizer.json: its decoder says how token strings
  // encode bytes (byte-level BPE, byte fallback or raw), which xgrammar reads.
  std::filesystem::path tokenizer_json;
  // Rows of the LM head (may exceed the tokenizer's ids; those are never allowed).
  int vocab_size = 0;
  // The model's EOS ids: allowed exactly when the output is complete.
  std::vector<std::int32_t> stop_token_ids;
};

struct GrammarCompilerOptions {
  std::size_t max_cached_grammars = 256;
  int compile_threads = 8;  // xgrammar's per-compile parallelism (capped at the host's threads)
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(VocabularySource source, GrammarCompilerOptions options = {});
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // The grammar of `c` (cached). invalid_argument says why a spec cannot be
  // compiled (bad JSON, unsupported schema keyword, regex or EBNF syntax).
  Result<std::shared_ptr<const CompiledGrammar>> compile(const Constraint& c);
  // A fresh matcher of `c` for one request: compile + stop ids.
  Result<std::unique_ptr<Matcher>> make_matcher(const Constraint& c);

  int vocab_size() const { return source_.vocab_size; }
  const std::vector<std::int32_t>& stop_token_ids() const { return source_.stop_token_ids; }
  GrammarCacheStats cache_stats() const { return cache_.stats(); }

 private:
  struct Xgrammar;
  Status ensure_vocabulary();
  Result<std::shared_ptr<const CompiledGrammar>> compile_uncached(const Constraint& c);

  VocabularySource source_;
  GrammarCompilerOptions options_;
  GrammarCache cache_;
  std::once_flag vocabulary_once_;
  Status vocabulary_status_;
  std::unique_ptr<Xgrammar> xgrammar_;  // built by ensure_vocabulary()
};

}  // namespace vpod::grammar
