// GrammarState (grammar_state.h).
#include "grammar/grammar_state.h"

#include <utility>

namespace vpod::grammar {

GrammarState::GrammarState(std::unique_ptr<Matcher> m)
    : matcher(std::move(m)),
      mask(static_cast<std::size_t>(token_bitmask_words(matcher->vocab_size()))) {
  pending.reserve(8);  // one token per step; a few after a deferral or recompute
}

}  // namespace vpod::grammar
