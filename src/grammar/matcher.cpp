// Matcher and CompiledGrammar (matcher.h) over xgrammar's GrammarMatcher.
#include "grammar/matcher.h"

#include <dlpack/dlpack.h>
#include <xgrammar/matcher.h>

#include <utility>

#include "common/check.h"
#include "grammar/compiled_grammar_impl.h"

namespace vpod::grammar {

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
int CompiledGrammar::vocab_size() const { return impl_->vocab_size; }
std::size_t CompiledGrammar::memory_bytes() const { return impl_->compiled.MemorySizeBytes(); }

struct Matcher::Impl {
  xgrammar::GrammarMatcher matcher;
};

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar,
                 std::vector<std::int32_t> stop_token_ids)
    : grammar_(std::move(grammar)),
      stop_token_ids_(std::move(stop_token_ids)),
      vocab_size_(grammar_->vocab_size()) {
  std::optional<std::vector<int>> stops;
  if (!stop_token_ids_.empty())
    stops = std::vector<int>(stop_token_ids_.begin(), stop_token_ids_.end());
  impl_ = std::make_unique<Impl>(Impl{xgrammar::GrammarMatcher(grammar_->impl().compiled, stops)});
  // The ids the mask allows at the end: ours, or xgrammar's detected ones
  // when we gave none (the engine ends a request on these).
  const std::vector<int>& effective = impl_->matcher.GetStopTokenIds();
  stop_token_ids_.assign(effective.begin(), effective.end());
}

Matcher::~Matcher() = default;

bool Matcher::accept(std::int32_t token) {
  if (token < 0 || token >= vocab_size_ || impl_->matcher.IsTerminated()) return false;
  return impl_->matcher.AcceptToken(token);
}

void Matcher::fill_bitmask(std::span<std::uint32_t> row) {
  VPOD_CHECK(static_cast<int>(row.size()) == token_bitmask_words(vocab_size_));
  VPOD_CHECK(!impl_->matcher.IsTerminated());
  // A [1, words] int32 view of `row` (xgrammar's bitmask dtype; same bits).
  std::int64_t shape[1] = {static_cast<std::int64_t>(row.size())};
  DLTensor t{};
  t.data = row.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t, 0);
}

bool Matcher::terminated() const { return impl_->matcher.IsTerminated(); }
bool Matcher::completed() const { return impl_->matcher.IsCompleted(); }

}  // namespace vpod::grammar
