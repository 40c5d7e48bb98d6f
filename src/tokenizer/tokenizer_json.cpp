// Reads tokenizer.json (simdjson DOM) into a Tokenizer. Every component is
// checked against what we implement; anything else is rejected with the
// component's type and its place in the file.
#include <simdjson.h>

#include <fmt/format.h>

#include "common/utf8.h"
#include "tokenizer/tokenizer.h"

namespace vpod::tokenizer {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

namespace {

Status bad(std::string_view where, std::string_view what) {
  return invalid_argument(fmt::format("tokenizer.json: {}: {}", where, what));
}

Status unsupported(std::string_view where, std::string_view kind, std::string_view type) {
  return unimplemented(
      fmt::format("tokenizer.json: {}: {} type '{}' is not supported", where, kind, type));
}

Result<object> as_object(element e, std::string_view where) {
  object o;
  if (e.get_object().get(o)) return bad(where, "expected an object");
  return o;
}

Result<array> as_array(element e, std::string_view where) {
  array a;
  if (e.get_array().get(a)) return bad(where, "expected an array");
  return a;
}

// The value under `key`, or nullopt when absent or null.
std::optional<element> field(object o, std::string_view key) {
  element e;
  if (o.at_key(key).get(e) || e.is_null()) return std::nullopt;
  return e;
}

Result<std::string_view> required_string(object o, std::string_view key, std::string_view where) {
  std::string_view s;
  const std::optional<element> e = field(o, key);
  if (!e || e->get_string().get(s)) return bad(where, fmt::format("'{}' must be a string", key));
  return s;
}

Result<std::optional<std::string_view>> optional_string(object o, std::string_view key,
                                                        std::string_view where) {
  const std::optional<element> e = field(o, key);
  if (!e) return std::optional<std::string_view>{};
  std::string_view s;
  if (e->get_string().get(s)) return bad(where, fmt::format("'{}' must be a string", key));
  return std::optional<std::string_view>{s};
}

Result<bool> optional_bool(object o, std::string_view key, bool fallback, std::string_view where) {
  const std::optional<element> e = field(o, key);
  if (!e) return fallback;
  bool b;
  if (e->get_bool().get(b)) return bad(where, fmt::format("'{}' must be a boolean", key));
  return b;
}

Result<std::int64_t> required_int(object o, std::string_view key, std::string_view where) {
  const std::optional<element> e = field(o, key);
  std::int64_t v;
  if (!e || e->get_int64().get(v)) return bad(where, fmt::format("'{}' must be an integer", key));
  return v;
}

// Ids index dense tables, so a file may not name absurdly large ones (the
// largest vocabularies in use have a few hundred thousand tokens).
constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 24) - 1;

Result<TokenId> token_id(std::int64_t v, std::string_view where) {
  if (v < 0 || v > kMaxTokenId) {
    return bad(where, fmt::format("token id {} is out of range [0, {}]", v, kMaxTokenId));
  }
  return static_cast<TokenId>(v);
}

// A field holding exactly one character.
Result<char32_t> required_char(object o, std::string_view key, std::string_view where) {
  VPOD_ASSIGN_OR_RETURN(std::string_view s, required_string(o, key, where));
  if (s.empty() || !utf8::is_valid(s) || utf8::count_chars(s) != 1) {
    return bad(where, fmt::format("'{}' must be a single character", key));
  }
  std::size_t pos = 0;
  return utf8::decode(s, pos);
}

// {"String": "..."} or {"Regex": "..."}.
Result<Regex> pattern_field(object o, std::string_view where) {
  const std::optional<element> e = field(o, "pattern");
  if (!e) return bad(where, "'pattern' is missing");
  VPOD_ASSIGN_OR_RETURN(object p, as_object(*e, where));
  if (auto s = field(p, "String")) {
    std::string_view text;
    if (s->get_string().get(text)) return bad(where, "'pattern.String' must be a string");
    auto regex = Regex::literal(text);
    if (!regex.ok()) return regex.status().with_context(fmt::format("tokenizer.json: {}", where));
    return regex;
  }
  if (auto r = field(p, "Regex")) {
    std::string_view text;
    if (r->get_string().get(text)) return bad(where, "'pattern.Regex' must be a string");
    auto regex = Regex::compile(text);
    if (!regex.ok()) return regex.status().with_context(fmt::format("tokenizer.json: {}", where));
    return regex;
  }
  return bad(where, "'pattern' must hold 'String' or 'Regex'");
}

Result<PrependScheme> prepend_scheme_field(object o, std::string_view where) {
  VPOD_ASSIGN_OR_RETURN(auto name, optional_string(o, "prepend_scheme", where));
  PrependScheme scheme = PrependScheme::always;
  if (name) {
    if (*name == "first") {
      scheme = PrependScheme::first;
    } else if (*name == "always") {
      scheme = PrependScheme::always;
    } else if (*name == "never") {
      scheme = PrependScheme::never;
    } else {
      return bad(where, fmt::format("unknown prepend_scheme '{}'", *name));
    }
  }
  // Older files say add_prefix_space; tokenizers accepts it only when it
  // agrees with the scheme (false means "never").
  VPOD_ASSIGN_OR_RETURN(bool add_prefix_space, optional_bool(o, "add_prefix_space", true, where));
  if (!add_prefix_space && scheme != PrependScheme::never) {
    return bad(where, "add_prefix_space does not match prepend_scheme");
  }
  return scheme;
}

std::string index_path(std::string_view where, std::string_view key, std::size_t i) {
  return fmt::format("{}.{}[{}]", where, key, i);
}

}  // namespace

class TokenizerLoader {
 public:
  static Result<Tokenizer> load(element root);

 private:
  static Result<std::unique_ptr<BpeModel>> model(element e);
  static Result<std::unique_ptr<Normalizer>> normalizer(element e, const std::string& where);
  static Result<std::unique_ptr<PreTokenizer>> pre_tokenizer(element e, const std::string& where);
  static Result<std::unique_ptr<PostProcessor>> post_processor(element e, const std::string& where);
  static Result<std::unique_ptr<Decoder>> decoder(element e, const std::string& where);
  static Result<std::vector<AddedToken>> added_tokens(element e);
};

Result<std::unique_ptr<BpeModel>> TokenizerLoader::model(element e) {
  const std::string where = "model";
  VPOD_ASSIGN_OR_RETURN(object o, as_object(e, where));
  VPOD_ASSIGN_OR_RETURN(auto type, optional_string(o, "type", where));
  if (type && *type != "BPE") return unsupported(where, "model", *type);
  if (!type && !field(o, "merges")) return bad(where, "model without 'type' is not a BPE model");

  if (auto dropout = field(o, "dropout")) {
    double p = 0;
    if (dropout->get_double().get(p)) return bad(where, "'dropout' must be a number");
    if (p != 0.0) return bad(where, "BPE dropout is random and not supported for serving");
  }
  BpeOptions options;
  VPOD_ASSIGN_OR_RETURN(auto unk, optional_string(o, "unk_token", where));
  if (unk) options.unk_token = std::string(*unk);
  VPOD_ASSIGN_OR_RETURN(auto prefix, optional_string(o, "continuing_subword_prefix", where));
  if (prefix) options.continuing_subword_prefix = std::string(*prefix);
  VPOD_ASSIGN_OR_RETURN(auto suffix, optional_string(o, "end_of_word_suffix", where));
  if (suffix) options.end_of_word_suffix = std::string(*suffix);
  VPOD_ASSIGN_OR_RETURN(options.fuse_unk, optional_bool(o, "fuse_unk", false, where));
  VPOD_ASSIGN_OR_RETURN(options.byte_fallback, optional_bool(o, "byte_fallback", false, where));
  VPOD_ASSIGN_OR_RETURN(options.ignore_merges, optional_bool(o, "ignore_merges", false, where));

  const std::optional<element> vocab_element = field(o, "vocab");
  if (!vocab_element) return bad(where, "'vocab' is missing");
  VPOD_ASSIGN_OR_RETURN(object vocab_object, as_object(*vocab_element, "model.vocab"));
  std::vector<std::string_view> tokens;
  std::vector<TokenId> ids;
  tokens.reserve(vocab_object.size());
  ids.reserve(vocab_object.size());
  for (const auto field_pair : vocab_object) {
    std::int64_t id;
    if (field_pair.value.get_int64().get(id)) {
      return bad("model.vocab", fmt::format("the id of '{}' must be an integer", field_pair.key));
    }
    VPOD_ASSIGN_OR_RETURN(TokenId checked, token_id(id, "model.vocab"));
    tokens.push_back(field_pair.key);
    ids.push_back(checked);
  }
  Vocab vocab;
  vocab.insert_batch(tokens, ids);
  auto bpe = std::make_unique<BpeModel>(std::move(vocab), std::move(options));

  const std::optional<element> merges_element = field(o, "merges");
  if (merges_element) {
    VPOD_ASSIGN_OR_RETURN(array merges, as_array(*merges_element, "model.merges"));
    std::vector<std::pair<std::string_view, std::string_view>> pairs;
    pairs.reserve(merges.size());
    std::size_t index = 0;
    for (const element merge : merges) {
      std::string_view line;
      array pair;
      if (!merge.get_string().get(line)) {
        // "a b": exactly one space (tokenizers' convert_merges_to_hashmap).
        if (line.substr(0, 8) == "#version") continue;
        const std::size_t space = line.find(' ');
        if (space == line.npos || line.find(' ', space + 1) != line.npos) {
          return bad(index_path("model", "merges", index), fmt::format("bad merge '{}'", line));
        }
        pairs.emplace_back(line.substr(0, space), line.substr(space + 1));
      } else if (!merge.get_array().get(pair)) {
        std::string_view a, b;
        if (pair.size() != 2 || pair.at(0).get_string().get(a) || pair.at(1).get_string().get(b)) {
          return bad(index_path("model", "merges", index), "a merge must be two strings");
        }
        pairs.emplace_back(a, b);
      } else {
        return bad(index_path("model", "merges", index), "a merge must be a string or a pair");
      }
      ++index;
    }
    const Status added = bpe->add_merges(pairs);
    if (!added.ok()) return added.with_context("tokenizer.json: model");
  }
  return bpe;
}

Result<std::unique_ptr<Normalizer>> TokenizerLoader::normalizer(element e,
                                                                const std::string& where) {
  VPOD_ASSIGN_OR_RETURN(object o, as_object(e, where));
  VPOD_ASSIGN_OR_RETURN(std::string_view type, required_string(o, "type", where));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfkd));
  if (type == "Prepend") {
    VPOD_ASSIGN_OR_RETURN(std::string_view prepend, required_string(o, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::string(prepend)));
  }
  if (type == "Replace") {
    VPOD_ASSIGN_OR_RETURN(Regex pattern, pattern_field(o, where));
    VPOD_ASSIGN_OR_RETURN(std::string_view content, required_string(o, "content", where));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(pattern), std::string(content)));
  }
  if (type == "Sequence") {
    const std::optional<element> list = field(o, "normalizers");
    if (!list) return bad(where, "'normalizers' is missing");
    VPOD_ASSIGN_OR_RETURN(array items, as_array(*list, where));
    std::vector<std::unique_ptr<Normalizer>> steps;
    std::size_t i = 0;
    for (const element item : items) {
      VPOD_ASSIGN_OR_RETURN(auto step, normalizer(item, index_path(where, "normalizers", i++)));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  return unsupported(where, "normalizer", type);
}

Result<std::unique_ptr<PreTokenizer>> TokenizerLoader::pre_tokenizer(element e,
                                                                     const std::string& where) {
  VPOD_ASSIGN_OR_RETURN(object o, as_object(e, where));
  VPOD_ASSIGN_OR_RETURN(std::string_view type, required_string(o, "type", where));
  if (type == "Split") {
    VPOD_ASSIGN_OR_RETURN(Regex pattern, pattern_field(o, where));
    VPOD_ASSIGN_OR_RETURN(std::string_view name, required_string(o, "behavior", where));
    SplitBehavior behavior;
    if (name == "Removed") {
      behavior = SplitBehavior::removed;
    } else if (name == "Isolated") {
      behavior = SplitBehavior::isolated;
    } else if (name == "MergedWithPrevious") {
      behavior = SplitBehavior::merged_with_previous;
    } else if (name == "MergedWithNext") {
      behavior = SplitBehavior::merged_with_next;
    } else if (name == "Contiguous") {
      behavior = SplitBehavior::contiguous;
    } else {
      return bad(where, fmt::format("unknown split behavior '{}'", name));
    }
    VPOD_ASSIGN_OR_RETURN(bool invert, optional_bool(o, "invert", false, where));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(pattern), behavior, invert));
  }
  if (type == "ByteLevel") {
    VPOD_ASSIGN_OR_RETURN(bool add_prefix_space, optional_bool(o, "add_prefix_space", true, where));
    VPOD_ASSIGN_OR_RETURN(bool use_regex, optional_bool(o, "use_regex", true, where));
    VPOD_ASSIGN_OR_RETURN(auto byte_level,
                          ByteLevelPreTokenizer::create(add_prefix_space, use_regex));
    return std::unique_ptr<PreTokenizer>(std::move(byte_level));
  }
  if (type == "Metaspace") {
    VPOD_ASSIGN_OR_RETURN(char32_t replacement, required_char(o, "replacement", where));
    VPOD_ASSIGN_OR_RETURN(PrependScheme scheme, prepend_scheme_field(o, where));
    VPOD_ASSIGN_OR_RETURN(bool split, optional_bool(o, "split", true, where));
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, scheme, split));
  }
  if (type == "Sequence") {
    const std::optional<element> list = field(o, "pretokenizers");
    if (!list) return bad(where, "'pretokenizers' is missing");
    VPOD_ASSIGN_OR_RETURN(array items, as_array(*list, where));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    std::size_t i = 0;
    for (const element item : items) {
      VPOD_ASSIGN_OR_RETURN(auto step,
                            pre_tokenizer(item, index_path(where, "pretokenizers", i++)));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  return unsupported(where, "pre-tokenizer", type);
}

Result<std::unique_ptr<PostProcessor>> TokenizerLoader::post_processor(element e,
                                                                       const std::string& where) {
  VPOD_ASSIGN_OR_RETURN(object o, as_object(e, where));
  VPOD_ASSIGN_OR_RETURN(std::string_view type, required_string(o, "type", where));
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new ByteLevelPostProcessor);
  if (type == "TemplateProcessing") {
    // special_tokens: name -> {"id": name, "ids": [...], "tokens": [...]}
    std::unordered_map<std::string, std::vector<TokenId>> specials;
    if (auto s = field(o, "special_tokens")) {
      VPOD_ASSIGN_OR_RETURN(object map, as_object(*s, where + ".special_tokens"));
      for (const auto entry : map) {
        const std::string entry_where = fmt::format("{}.special_tokens.{}", where, entry.key);
        VPOD_ASSIGN_OR_RETURN(object token, as_object(entry.value, entry_where));
        const std::optional<element> ids_element = field(token, "ids");
        if (!ids_element) return bad(entry_where, "'ids' is missing");
        VPOD_ASSIGN_OR_RETURN(array ids, as_array(*ids_element, entry_where));
        std::vector<TokenId> values;
        for (const element id : ids) {
          std::int64_t v;
          if (id.get_int64().get(v)) return bad(entry_where, "'ids' must hold integers");
          VPOD_ASSIGN_OR_RETURN(TokenId checked, token_id(v, entry_where));
          values.push_back(checked);
        }
        specials[std::string(entry.key)] = std::move(values);
      }
    }
    const std::optional<element> single = field(o, "single");
    if (!single) return bad(where, "'single' is missing");
    if (single->is_string()) {
      return bad(where, "a template written as a string is not supported; expected a list");
    }
    VPOD_ASSIGN_OR_RETURN(array items, as_array(*single, where + ".single"));
    std::vector<TemplatePostProcessor::Item> template_items;
    std::size_t i = 0;
    for (const element item : items) {
      const std::string item_where = index_path(where, "single", i++);
      VPOD_ASSIGN_OR_RETURN(object piece, as_object(item, item_where));
      if (auto seq = field(piece, "Sequence")) {
        VPOD_ASSIGN_OR_RETURN(object s, as_object(*seq, item_where));
        VPOD_ASSIGN_OR_RETURN(std::string_view id, required_string(s, "id", item_where));
        if (id != "A") return bad(item_where, "the single template may only hold sequence A");
        template_items.push_back({true, {}});
      } else if (auto special = field(piece, "SpecialToken")) {
        VPOD_ASSIGN_OR_RETURN(object s, as_object(*special, item_where));
        VPOD_ASSIGN_OR_RETURN(std::string_view id, required_string(s, "id", item_where));
        const auto it = specials.find(std::string(id));
        if (it == specials.end()) {
          return bad(item_where, fmt::format("special token '{}' is not in special_tokens", id));
        }
        template_items.push_back({false, it->second});
      } else {
        return bad(item_where, "expected 'Sequence' or 'SpecialToken'");
      }
    }
    return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(template_items)));
  }
  if (type == "Sequence") {
    const std::optional<element> list = field(o, "processors");
    if (!list) return bad(where, "'processors' is missing");
    VPOD_ASSIGN_OR_RETURN(array items, as_array(*list, where));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    std::size_t i = 0;
    for (const element item : items) {
      VPOD_ASSIGN_OR_RETURN(auto step, post_processor(item, index_path(where, "processors", i++)));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PostProcessor>(new SequencePostProcessor(std::move(steps)));
  }
  return unsupported(where, "post-processor", type);
}

Result<std::unique_ptr<Decoder>> TokenizerLoader::decoder(element e, const std::string& where) {
  VPOD_ASSIGN_OR_RETURN(object o, as_object(e, where));
  VPOD_ASSIGN_OR_RETURN(std::string_view type, required_string(o, "type", where));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder);
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder);
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder);
  if (type == "Replace") {
    VPOD_ASSIGN_OR_RETURN(Regex pattern, pattern_field(o, where));
    VPOD_ASSIGN_OR_RETURN(std::string_view content, required_string(o, "content", where));
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(ReplaceNormalizer(std::move(pattern), std::string(content))));
  }
  if (type == "Strip") {
    VPOD_ASSIGN_OR_RETURN(char32_t content, required_char(o, "content", where));
    VPOD_ASSIGN_OR_RETURN(std::int64_t start, required_int(o, "start", where));
    VPOD_ASSIGN_OR_RETURN(std::int64_t stop, required_int(o, "stop", where));
    if (start < 0 || stop < 0) return bad(where, "'start' and 'stop' must be >= 0");
    return std::unique_ptr<Decoder>(
        new StripDecoder(content, static_cast<std::size_t>(start), static_cast<std::size_t>(stop)));
  }
  if (type == "Metaspace") {
    VPOD_ASSIGN_OR_RETURN(char32_t replacement, required_char(o, "replacement", where));
    VPOD_ASSIGN_OR_RETURN(PrependScheme scheme, prepend_scheme_field(o, where));
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, scheme));
  }
  if (type == "Sequence") {
    const std::optional<element> list = field(o, "decoders");
    if (!list) return bad(where, "'decoders' is missing");
    VPOD_ASSIGN_OR_RETURN(array items, as_array(*list, where));
    std::vector<std::unique_ptr<Decoder>> steps;
    std::size_t i = 0;
    for (const element item : items) {
      VPOD_ASSIGN_OR_RETURN(auto step, decoder(item, index_path(where, "decoders", i++)));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  return unsupported(where, "decoder", type);
}

Result<std::vector<AddedToken>> TokenizerLoader::added_tokens(element e) {
  VPOD_ASSIGN_OR_RETURN(array items, as_array(e, "added_tokens"));
  std::vector<AddedToken> tokens;
  std::size_t i = 0;
  for (const element item : items) {
    const std::string where = fmt::format("added_tokens[{}]", i++);
    VPOD_ASSIGN_OR_RETURN(object o, as_object(item, where));
    AddedToken token;
    VPOD_ASSIGN_OR_RETURN(std::int64_t id, required_int(o, "id", where));
    VPOD_ASSIGN_OR_RETURN(token.id, token_id(id, where));
    VPOD_ASSIGN_OR_RETURN(std::string_view content, required_string(o, "content", where));
    token.content = std::string(content);
    VPOD_ASSIGN_OR_RETURN(token.single_word, optional_bool(o, "single_word", false, where));
    VPOD_ASSIGN_OR_RETURN(token.lstrip, optional_bool(o, "lstrip", false, where));
    VPOD_ASSIGN_OR_RETURN(token.rstrip, optional_bool(o, "rstrip", false, where));
    VPOD_ASSIGN_OR_RETURN(token.normalized, optional_bool(o, "normalized", true, where));
    VPOD_ASSIGN_OR_RETURN(token.special, optional_bool(o, "special", false, where));
    tokens.push_back(std::move(token));
  }
  return tokens;
}

Result<Tokenizer> TokenizerLoader::load(element root_element) {
  VPOD_ASSIGN_OR_RETURN(object root, as_object(root_element, "top level"));
  // Truncation and padding would change the ids encode returns; the engine
  // handles lengths itself, so a file asking for them is refused.
  if (field(root, "truncation")) return unsupported("truncation", "truncation", "non-null");
  if (field(root, "padding")) return unsupported("padding", "padding", "non-null");

  Tokenizer tokenizer;
  const std::optional<element> model_element = field(root, "model");
  if (!model_element) return bad("model", "missing");
  VPOD_ASSIGN_OR_RETURN(tokenizer.model_, model(*model_element));
  if (auto e = field(root, "normalizer")) {
    VPOD_ASSIGN_OR_RETURN(tokenizer.normalizer_, normalizer(*e, "normalizer"));
  }
  if (auto e = field(root, "pre_tokenizer")) {
    VPOD_ASSIGN_OR_RETURN(tokenizer.pre_tokenizer_, pre_tokenizer(*e, "pre_tokenizer"));
  }
  if (auto e = field(root, "post_processor")) {
    VPOD_ASSIGN_OR_RETURN(tokenizer.post_processor_, post_processor(*e, "post_processor"));
  }
  if (auto e = field(root, "decoder")) {
    VPOD_ASSIGN_OR_RETURN(tokenizer.decoder_, decoder(*e, "decoder"));
  }
  std::vector<AddedToken> tokens;
  if (auto e = field(root, "added_tokens")) {
    VPOD_ASSIGN_OR_RETURN(tokens, added_tokens(*e));
  }
  auto added =
      AddedVocabulary::build(std::move(tokens), *tokenizer.model_, tokenizer.normalizer_.get());
  if (!added.ok()) return added.status().with_context("tokenizer.json: added_tokens");
  tokenizer.added_ = std::move(added).value();
  return tokenizer;
}

namespace {

Result<Tokenizer> parse(const simdjson::padded_string& json) {
  simdjson::dom::parser parser;
  element root;
  if (const auto error = parser.parse(json).get(root)) {
    return invalid_argument(
        fmt::format("tokenizer.json is not valid JSON: {}", simdjson::error_message(error)));
  }
  return TokenizerLoader::load(root);
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view json) {
  return parse(simdjson::padded_string(json));
}

Result<Tokenizer> Tokenizer::from_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) file /= "tokenizer.json";
  if (!std::filesystem::is_regular_file(file, ec)) {
    return not_found(fmt::format("{}: no such tokenizer file", file.string()));
  }
  simdjson::padded_string json;
  if (const auto error = simdjson::padded_string::load(file.string()).get(json)) {
    return not_found(
        fmt::format("{}: cannot read: {}", file.string(), simdjson::error_message(error)));
  }
  auto tokenizer = parse(json);
  if (!tokenizer.ok()) return tokenizer.status().with_context(file.string());
  return tokenizer;
}

}  // namespace vpod::tokenizer
