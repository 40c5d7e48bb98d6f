// Private to src/grammar/: what a CompiledGrammar holds (xgrammar's type).
#pragma once

#include <xgrammar/compiler.h>

#include "grammar/matcher.h"

namespace vpod::grammar {

struct CompiledGrammar::Impl {
  xgrammar::CompiledGrammar compiled;
  int vocab_size = 0;
};

}  // namespace vpod::grammar
