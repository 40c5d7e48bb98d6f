// libFuzzer target: tokenizer.json loading, then encode/decode/streaming with
// whatever loaded. Bad files must give a Status, never a crash or a hang.
// Seeds: tests/tokenizer/data/trained/*.json (and the fixtures, if present).
//   tokenizer_json_fuzz -max_total_time=60 -max_len=65536 corpus/ tests/tokenizer/data/trained
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr std::string_view kSamples[] = {"Hello world, it's 2024!", "  \t\n\r\n spaces ",
                                         "中文 😀👨‍👩‍👧 e\xCC\x81 \xC2\xA0",
                                         "<s>[INST] hi [/INST]</s><|endoftext|>", ""};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vpod::tokenizer::TokenId;
  using vpod::tokenizer::Tokenizer;
  auto tok = Tokenizer::from_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!tok.ok()) return 0;
  for (const std::string_view text : kSamples) {
    auto ids = tok->encode(text, true);
    if (!ids.ok()) continue;
    (void)tok->decode(*ids, false);
    vpod::tokenizer::IncrementalDetokenizer stream(*tok, true);
    for (const TokenId id : *ids) (void)stream.feed(id);
    (void)stream.finish();
  }
  // Decode arbitrary ids, including unknown ones.
  std::vector<TokenId> ids;
  const std::size_t limit = tok->vocab_size() + 2;
  for (std::size_t i = 0; i < 64; ++i) ids.push_back(static_cast<TokenId>((i * 7919) % limit));
  (void)tok->decode(ids, false);
  (void)tok->decode(ids, true);
  return 0;
}
