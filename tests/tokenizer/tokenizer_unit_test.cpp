// Unit tests of the tokenizer's parts: UTF-8 handling, Oniguruma-compatible
// regex iteration, split behaviours, BPE merge order, added-token rules, the
// loader's errors, the JSON-lines protocol and concurrent use. Expected values
// were taken from Hugging Face tokenizers 0.22.1 where they come from it.
#include <gtest/gtest.h>

#include <thread>

#include "common/utf8.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenize_lines.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_data.h"

namespace vpod::tokenizer {
namespace {

const std::string kFffd(utf8::kReplacementChar);

TEST(Utf8, LossyReplacesMaximalInvalidSubpartsLikeRust) {
  EXPECT_EQ(utf8::lossy("abc"), "abc");
  EXPECT_EQ(utf8::lossy("\xF0\x90\x80"), kFffd);  // truncated 4-byte sequence
  EXPECT_EQ(utf8::lossy("\xF0\x90\x80z"), kFffd + "z");
  EXPECT_EQ(utf8::lossy("\xC0\x80"), kFffd + kFffd);              // C0 never starts a sequence
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // a surrogate
  EXPECT_EQ(utf8::lossy("\xE4\xB8\xAD\x80"), "\xE4\xB8\xAD" + kFffd);
  EXPECT_EQ(utf8::lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_TRUE(utf8::is_valid("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\xF0\x9F\x98"));
  EXPECT_EQ(utf8::count_chars("a\xC3\xA9\xF0\x9F\x98\x80"), 3u);
}

std::vector<std::string> split_isolated(const Regex& regex, const std::string& text,
                                        SplitBehavior behavior = SplitBehavior::isolated) {
  std::vector<MatchSpan> spans, ranges;
  EXPECT_TRUE(regex.find_matches(text, spans).ok());
  apply_split_behavior(spans, behavior, ranges);
  std::vector<std::string> out;
  for (const MatchSpan& r : ranges) {
    if (r.end > r.begin) out.push_back(text.substr(r.begin, r.end - r.begin));
  }
  return out;
}

TEST(Regex, WhitespaceIsTheUnicodeWhiteSpacePropertyAsInOniguruma) {
  auto regex = Regex::compile(R"(\s)");
  ASSERT_TRUE(regex.ok());
  // Oniguruma's \s: U+0085 and U+00A0 yes, U+180E, U+200B and U+001C no.
  for (const char* yes :
       {"\t", "\x0B", " ", "\xC2\x85", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8"}) {
    EXPECT_EQ(split_isolated(*regex, std::string("a") + yes + "b").size(), 3u) << yes;
  }
  for (const char* no : {"\x1C", "\xE1\xA0\x8E", "\xE2\x80\x8B", "\xEF\xBB\xBF"}) {
    EXPECT_EQ(split_isolated(*regex, std::string("a") + no + "b").size(), 1u) << no;
  }
}

TEST(Regex, EmptyMatchesIterateLikeTheOnigCrate) {
  // tokenizers: Split(Regex("x*"), "isolated") on "axxbé" gives a|xx|b|é, and
  // "removed" gives a|b|é.
  auto regex = Regex::compile("x*");
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(split_isolated(*regex, "axxb\xC3\xA9"),
            (std::vector<std::string>{"a", "xx", "b", "\xC3\xA9"}));
  EXPECT_EQ(split_isolated(*regex, "axxb\xC3\xA9", SplitBehavior::removed),
            (std::vector<std::string>{"a", "b", "\xC3\xA9"}));
}

TEST(Regex, CaseInsensitiveContractionsFoldLongS) {
  // tokenizers splits "x'ſ x'S" at "'ſ" and "'S": (?i) folds U+017F to s.
  auto regex = Regex::compile(R"((?i:'s|'t))");
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(split_isolated(*regex, "x'\xC5\xBF x'S"),
            (std::vector<std::string>{"x", "'\xC5\xBF", " x", "'S"}));
}

TEST(Regex, LiteralPatternsQuoteEverything) {
  auto regex = Regex::literal("a.b\\E*");
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(split_isolated(*regex, "xa.b\\E*yaxb"),
            (std::vector<std::string>{"x", "a.b\\E*", "yaxb"}));
}

TEST(Split, BehavioursMatchTokenizers) {
  // tokenizers' own test: "The-final--countdown" split on '-'.
  auto regex = Regex::literal("-");
  ASSERT_TRUE(regex.ok());
  const std::string text = "The-final--countdown";
  using V = std::vector<std::string>;
  EXPECT_EQ(split_isolated(*regex, text, SplitBehavior::removed), (V{"The", "final", "countdown"}));
  EXPECT_EQ(split_isolated(*regex, text, SplitBehavior::isolated),
            (V{"The", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_isolated(*regex, text, SplitBehavior::merged_with_previous),
            (V{"The-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_isolated(*regex, text, SplitBehavior::merged_with_next),
            (V{"The", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_isolated(*regex, text, SplitBehavior::contiguous),
            (V{"The", "-", "final", "--", "countdown"}));
}

// A tiny byte-level tokenizer.json for the tests below.
std::string tiny_tokenizer_json() {
  return R"({"version":"1.0","truncation":null,"padding":null,
    "added_tokens":[{"id":6,"content":"<eos>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
    "normalizer":null,
    "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},
    "post_processor":null,
    "decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
    "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,
      "end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,
      "vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5},
      "merges":["b c","a b","a bc"]})"
         "}";
}

TEST(Bpe, MergesApplyLowestRankFirst) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // "b c" has rank 0, so "abc" is a + bc, then a bc -> abc.
  EXPECT_EQ(tok->encode("abc", false).value(), (std::vector<TokenId>{5}));
  EXPECT_EQ(tok->encode("ab", false).value(), (std::vector<TokenId>{3}));
  EXPECT_EQ(tok->encode("abab", false).value(), (std::vector<TokenId>{3, 3}));
  // Characters outside the vocab are dropped without an unk token (and what
  // is left still merges).
  EXPECT_EQ(tok->encode("axb", false).value(), (std::vector<TokenId>{3}));
  EXPECT_EQ(tok->encode("ab<eos>c", false).value(), (std::vector<TokenId>{3, 6, 2}));
  EXPECT_EQ(tok->decode(std::vector<TokenId>{5, 6, 99, 3}, false).value(), "abc<eos>ab");
  EXPECT_EQ(tok->decode(std::vector<TokenId>{5, 6, 99, 3}, true).value(), "abcab");
  EXPECT_TRUE(tok->is_special(6));
  EXPECT_EQ(tok->vocab_size(), 7u);
  EXPECT_EQ(tok->token_to_id("bc"), 4);
  EXPECT_EQ(tok->id_to_token(6).value(), "<eos>");
}

TEST(Bpe, MergesInArrayFormAreTheSame) {
  std::string json = tiny_tokenizer_json();
  const std::string from = R"("merges":["b c","a b","a bc"])";
  json.replace(json.find(from), from.size(), R"("merges":[["b","c"],["a","b"],["a","bc"]])");
  auto tok = Tokenizer::from_json(json);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("abcab", false).value(), (std::vector<TokenId>{5, 3}));
}

TEST(Bpe, InvalidUtf8InputIsAnError) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  ASSERT_TRUE(tok.ok());
  const auto ids = tok->encode("a\xFF", false);
  EXPECT_EQ(ids.status().code(), StatusCode::invalid_argument);
}

struct BadFile {
  std::string from;
  std::string to;
  StatusCode code;
  std::string message_part;
};

TEST(Loader, RejectsWhatItDoesNotImplementNamingTheComponent) {
  const std::vector<BadFile> cases = {
      {R"("normalizer":null)", R"("normalizer":{"type":"Lowercase"})", StatusCode::unimplemented,
       "normalizer: normalizer type 'Lowercase'"},
      {R"("normalizer":null)",
       R"("normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"StripAccents"}]})",
       StatusCode::unimplemented, "normalizer.normalizers[1]: normalizer type 'StripAccents'"},
      {R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})",
       R"("pre_tokenizer":{"type":"Whitespace"})", StatusCode::unimplemented,
       "pre-tokenizer type 'Whitespace'"},
      {R"("post_processor":null)", R"("post_processor":{"type":"BertProcessing"})",
       StatusCode::unimplemented, "post-processor type 'BertProcessing'"},
      {R"("decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})",
       R"("decoder":{"type":"WordPiece","prefix":"##"})", StatusCode::unimplemented,
       "decoder type 'WordPiece'"},
      {R"("type":"BPE")", R"("type":"Unigram")", StatusCode::unimplemented, "model type 'Unigram'"},
      {R"("truncation":null)", R"("truncation":{"max_length":512})", StatusCode::unimplemented,
       "truncation"},
      {R"("merges":["b c","a b","a bc"])", R"("merges":["b c","a z"])",
       StatusCode::invalid_argument, "merges[1]: token 'z' is not in the vocab"},
      {R"("merges":["b c","a b","a bc"])", R"("merges":["b c d"])", StatusCode::invalid_argument,
       "bad merge"},
      {R"("dropout":null)", R"("dropout":0.1)", StatusCode::invalid_argument, "dropout"},
      {R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})",
       R"("pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated","invert":false})",
       StatusCode::invalid_argument, "pre_tokenizer: regex /(unclosed/"},
      {R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})",
       R"("pre_tokenizer":{"type":"Metaspace","replacement":"ab"})", StatusCode::invalid_argument,
       "'replacement' must be a single character"},
      {R"("vocab":{)", R"("vocab":{"x":-1,)", StatusCode::invalid_argument, "out of range"},
  };
  for (const BadFile& c : cases) {
    std::string json = tiny_tokenizer_json();
    const std::size_t at = json.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    json.replace(at, c.from.size(), c.to);
    auto tok = Tokenizer::from_json(json);
    ASSERT_FALSE(tok.ok()) << c.to;
    EXPECT_EQ(tok.status().code(), c.code) << tok.status().to_string();
    EXPECT_NE(tok.status().message().find(c.message_part), std::string::npos)
        << tok.status().to_string();
  }
  EXPECT_FALSE(Tokenizer::from_json("{not json").ok());
  EXPECT_FALSE(Tokenizer::from_json("[]").ok());
  EXPECT_EQ(Tokenizer::from_file("/nonexistent/dir").status().code(), StatusCode::not_found);
}

TEST(TokenizeLines, EncodesAndDecodesJsonLines) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  ASSERT_TRUE(tok.ok());
  TokenizeLineOptions encode;
  EXPECT_EQ(process_tokenize_line(*tok, R"("abc<eos>")", encode).value(), "[5,6]");
  EXPECT_EQ(process_tokenize_line(*tok, R"("")", encode).value(), "[]");
  TokenizeLineOptions decode;
  decode.decode = true;
  EXPECT_EQ(process_tokenize_line(*tok, "[5, 6, 3]", decode).value(), R"("abc<eos>ab")");
  decode.skip_special_tokens = true;
  EXPECT_EQ(process_tokenize_line(*tok, "[5, 6, 3]", decode).value(), R"("abcab")");
  EXPECT_FALSE(process_tokenize_line(*tok, "[5, -1]", decode).ok());
  EXPECT_FALSE(process_tokenize_line(*tok, "[5, 1.5]", decode).ok());
  EXPECT_FALSE(process_tokenize_line(*tok, R"("abc")", decode).ok());
  EXPECT_FALSE(process_tokenize_line(*tok, "[1, 2]", encode).ok());
  EXPECT_FALSE(process_tokenize_line(*tok, "not json", encode).ok());
}

TEST(IncrementalDetokenizer, HoldsBackUnfinishedCharacters) {
  // Byte-level tokens for the three bytes of U+4E2D arrive one at a time.
  std::string json = tiny_tokenizer_json();
  const std::string from = R"("vocab":{)";
  json.replace(json.find(from), from.size(), R"("vocab":{"ä":10,"¸":11,"Ń":12,)");
  auto tok = Tokenizer::from_json(json);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  ASSERT_EQ(tok->decode(std::vector<TokenId>{10, 11, 12}, false).value(), "\xE4\xB8\xAD");
  IncrementalDetokenizer detok(*tok, false);
  EXPECT_EQ(detok.feed(0).value(), "a");
  EXPECT_EQ(detok.feed(10).value(), "");
  EXPECT_EQ(detok.feed(11).value(), "");
  EXPECT_EQ(detok.feed(12).value(), "\xE4\xB8\xAD");
  EXPECT_EQ(detok.feed(10).value(), "");
  EXPECT_EQ(detok.finish().value(), kFffd);  // the stream ended mid-character
  EXPECT_EQ(detok.num_generated(), 5u);
}

TEST(IncrementalDetokenizer, KeepsSentencePieceSpacesAtChunkBoundaries) {
  const auto path = testing::test_data_dir() / "trained" / "sentencepiece.json";
  auto tok = Tokenizer::from_file(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto ids = tok->encode("Hello world, how are you today", false).value();
  IncrementalDetokenizer detok(*tok, true);
  std::vector<std::string> deltas;
  std::string text;
  for (const TokenId id : ids) {
    deltas.push_back(detok.feed(id).value());
    text += deltas.back();
  }
  text += detok.finish().value();
  EXPECT_EQ(text, "Hello world, how are you today");
  // A word token after the first carries its leading space.
  bool saw_spaced_delta = false;
  for (std::size_t i = 1; i < deltas.size(); ++i)
    saw_spaced_delta |= !deltas[i].empty() && deltas[i][0] == ' ';
  EXPECT_TRUE(saw_spaced_delta);
  // Seeded with a prompt, the first generated word keeps its space too.
  const auto prompt = tok->encode("Say", false).value();
  const auto word = tok->encode(" hello", false).value();  // "▁hello" under prepend_scheme first
  IncrementalDetokenizer with_context(*tok, true, prompt);
  std::string continuation;
  for (const TokenId id : std::vector<TokenId>(word.begin(), word.end())) {
    continuation += with_context.feed(id).value();
  }
  continuation += with_context.finish().value();
  EXPECT_EQ(continuation, " hello");
}

TEST(Tokenizer, ConcurrentEncodesAgreeWithSequentialOnes) {
  const auto path = testing::test_data_dir() / "trained" / "bytelevel.json";
  auto tok = Tokenizer::from_file(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto corpus = testing::read_jsonl(testing::test_data_dir() / "corpus.jsonl");
  std::vector<std::vector<TokenId>> expected;
  for (const auto& line : corpus)
    expected.push_back(tok->encode(line.get<std::string>(), true).value());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::size_t i = 0; i < corpus.size(); ++i) {
          const auto ids =
              tok->encode(corpus[(i + t * 7) % corpus.size()].get<std::string>(), true);
          if (!ids.ok() || *ids != expected[(i + t * 7) % corpus.size()]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace vpod::tokenizer
