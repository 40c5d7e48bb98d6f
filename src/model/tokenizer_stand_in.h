// Stand-in tokenizers for `vpod make-model` presets whose real tokenizer is not
// a fixture. Yi-6B's tokenizer has 64000 tokens; the 32000-token Mistral one
// stands in for it. Copied as it is, half of the ids a random-weight model
// emits would have no text: the server would stream nothing for them, and a
// client's TTFT and ITL would count several tokens where the real model
// counts one. Extending the vocab to the model's size keeps the benchmark
// model's stream shaped like the real one's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace vpod::model {

// Appends made-up pieces to the vocab of a BPE tokenizer.json until its ids
// cover [0, vocab_size): each new piece joins two of the vocab's word pieces
// ("▁the" + "▁and" -> "▁theand"), is not already in the vocab, and gets the
// next id after the vocab's and the added tokens' largest. Merges, added
// tokens and everything else keep their values (objects are written with
// their keys sorted), so text encodes to the same ids as before; only
// decoding learns the new ids. Returns the input
// unchanged when the ids already reach vocab_size; an error when the file is
// not a BPE tokenizer.json or has no word pieces to join.
Result<std::string> extend_tokenizer_vocab(std::string_view tokenizer_json,
                                           std::int64_t vocab_size);

}  // namespace vpod::model
