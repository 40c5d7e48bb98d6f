// One request's grammar state (structured output): which tokens may come
// next, as a bitmask over the model's vocabulary, and whether the output so
// far is complete. Wraps xgrammar's GrammarMatcher over a CompiledGrammar
// (grammar_compiler.h); the xgrammar types stay inside src/grammar/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace vpod::grammar {

// A grammar compiled against one vocabulary (shared, immutable; the cache
// and every matcher built from it hold it).
class CompiledGrammar {
 public:
  struct Impl;
  explicit CompiledGrammar(std::unique_ptr<Impl> impl);
  ~CompiledGrammar();
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Impl& impl() const { return *impl_; }
  int vocab_size() const;
  std::size_t memory_bytes() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// 32-bit words of a token bitmask over `vocab_size` ids: bit (id % 32) of
// word (id / 32) set = the id may be sampled (xgrammar's layout, which the
// samplers read: kernels::SampleRequest::allowed_tokens).
inline int token_bitmask_words(int vocab_size) { return (vocab_size + 31) / 32; }

// Not thread-safe: one thread at a time (in the engine, only the model
// runner's mask jobs touch it; docs/structured_output.md).
class Matcher {
 public:
  // `stop_token_ids`: the ids that end the output once the grammar is
  // complete (the model's EOS ids); they are allowed exactly then.
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::vector<std::int32_t> stop_token_ids);
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Advances over a sampled token; false (state unchanged) if the grammar
  // does not allow it. A stop token is accepted only when complete, and
  // terminates the matcher.
  bool accept(std::int32_t token);
  // Writes the allowed next tokens into `row` (token_bitmask_words(vocab)
  // words). Must not be called once terminated.
  void fill_bitmask(std::span<std::uint32_t> row);
  // A stop token was accepted: the output is complete and ended.
  bool terminated() const;
  // The output so far is a complete sentence of the grammar (it may go on).
  bool completed() const;
  int vocab_size() const { return vocab_size_; }
  // The ids the mask allows once the output is complete (those given, or
  // the vocabulary's own if none were). Immutable: any thread may read them.
  const std::vector<std::int32_t>& stop_token_ids() const { return stop_token_ids_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<std::int32_t> stop_token_ids_;
  int vocab_size_ = 0;
};

}  // namespace vpod::grammar
