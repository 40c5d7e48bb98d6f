// GrammarCompiler (grammar_compiler.h): the vocabulary for xgrammar, the
// compile of each constraint kind, and xgrammar's exceptions as Statuses.
#include "grammar/grammar_compiler.h"

#include <xgrammar/compiler.h>
#include <xgrammar/tokenizer_info.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "grammar/compiled_grammar_impl.h"
#include "grammar/schema_check.h"
#include "tokenizer/tokenizer.h"

namespace vpod::grammar {

namespace {

// xgrammar's error text without its "[time] file.cc:line: " prefix.
std::string xgrammar_reason(const std::exception& e) {
  std::string what = e.what();
  const std::size_t cc = what.find(".cc:");
  if (cc != std::string::npos) {
    const std::size_t colon = what.find(": ", cc + 4);
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what;
}

// The field a constraint came from, for messages.
std::string_view kind_field(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::json_object: return "json_object";
    case ConstraintKind::json_schema: return "json_schema";
    case ConstraintKind::regex: return "regex";
    case ConstraintKind::choice: return "choice";
    case ConstraintKind::ebnf: return "grammar";
    case ConstraintKind::structural_tag: return "structural_tag";
    case ConstraintKind::none: break;
  }
  return "constraint";
}

// EBNF of "one of these strings": root ::= "a" | "b" (string literals with
// xgrammar's escapes).
Result<std::string> choice_ebnf(const std::string& spec) {
  nlohmann::json choices = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
  if (!choices.is_array() || choices.empty())
    return invalid_argument("choice must be a non-empty array of strings");
  std::string ebnf = "root ::= ";
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string())
      return invalid_argument("choice[" + std::to_string(i) + "] must be a string");
    const std::string& s = choices[i].get_ref<const std::string&>();
    if (s.empty()) return invalid_argument("choice[" + std::to_string(i) + "] must not be empty");
    if (i > 0) ebnf += " | ";
    ebnf += '"';
    for (char c : s) {
      switch (c) {
        case '"': ebnf += "\\\""; break;
        case '\\': ebnf += "\\\\"; break;
        case '\n': ebnf += "\\n"; break;
        case '\r': ebnf += "\\r"; break;
        case '\t': ebnf += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20)
            return invalid_argument("choice[" + std::to_string(i) +
                                    "] must not contain control characters");
          ebnf += c;
      }
    }
    ebnf += '"';
  }
  return ebnf;
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

struct GrammarCompiler::Xgrammar {
  xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(VocabularySource source, GrammarCompilerOptions options)
    : source_(std::move(source)), options_(options), cache_(options.max_cached_grammars) {}

GrammarCompiler::~GrammarCompiler() = default;

Status GrammarCompiler::ensure_vocabulary() {
  std::call_once(vocabulary_once_, [&] {
    vocabulary_status_ = [&]() -> Status {
      if (!source_.tokenizer)
        return failed_precondition("structured output needs the model's tokenizer");
      if (source_.vocab_size <= 0)
        return failed_precondition("structured output needs a vocab size");
      VPOD_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(source_.tokenizer_json));
      try {
        // Byte-level BPE (GPT-2 alphabet), byte fallback ("<0x0A>") or raw.
        const nlohmann::json meta =
            nlohmann::json::parse(xgrammar::TokenizerInfo::DetectMetadataFromHF(tokenizer_json));
        const auto vocab_type = static_cast<xgrammar::VocabType>(meta.at("vocab_type").get<int>());
        const bool add_prefix_space = meta.at("add_prefix_space").get<bool>();
        // Token strings by id; special tokens and gaps are "" (never text).
        const tokenizer::Tokenizer& tok = *source_.tokenizer;
        const int num_tokens =
            static_cast<int>(std::min<std::size_t>(tok.vocab_size(), source_.vocab_size));
        std::vector<std::string> encoded(static_cast<std::size_t>(num_tokens));
        for (int id = 0; id < num_tokens; ++id) {
          if (tok.is_special(id)) continue;
          if (auto s = tok.id_to_token(id)) encoded[static_cast<std::size_t>(id)] = std::string(*s);
        }
        std::optional<std::vector<std::int32_t>> stops;
        if (!source_.stop_token_ids.empty()) stops = source_.stop_token_ids;
        xgrammar::TokenizerInfo info(encoded, vocab_type, source_.vocab_size, stops,
                                     add_prefix_space);
        const int threads =
            std::max(1, std::min<int>(options_.compile_threads,
                                      static_cast<int>(std::thread::hardware_concurrency())));
        xgrammar_ = std::make_unique<Xgrammar>(
            Xgrammar{xgrammar::GrammarCompiler(info, threads, /*cache_enabled=*/false)});
      } catch (const std::exception& e) {
        return internal_error("building the grammar vocabulary failed: " + xgrammar_reason(e));
      }
      return {};
    }();
  });
  return vocabulary_status_;
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(const Constraint& c) {
  if (!c.active()) return invalid_argument("no constraint to compile");
  VPOD_RETURN_IF_ERROR(ensure_vocabulary());
  if (auto cached = cache_.find(c)) return cached;
  VPOD_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> compiled, compile_uncached(c));
  cache_.insert(c, compiled);
  return compiled;
}

Result<std::unique_ptr<Matcher>> GrammarCompiler::make_matcher(const Constraint& c) {
  VPOD_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> compiled, compile(c));
  try {
    return std::make_unique<Matcher>(std::move(compiled), source_.stop_token_ids);
  } catch (const std::exception& e) {
    return invalid_argument(std::string(kind_field(c.kind)) + ": " + xgrammar_reason(e));
  }
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_uncached(
    const Constraint& c) {
  const std::string field(kind_field(c.kind));
  xgrammar::GrammarCompiler& xg = xgrammar_->compiler;
  // Whitespace between JSON tokens is free (any_whitespace, vLLM's default)
  // unless the request disables it.
  const bool any_whitespace = c.any_whitespace;
  try {
    std::optional<xgrammar::CompiledGrammar> compiled;
    switch (c.kind) {
      case ConstraintKind::json_object:
        compiled = xg.CompileJSONSchema(R"({"type": "object"})", any_whitespace, std::nullopt,
                                        std::nullopt, /*strict_mode=*/false);
        break;
      case ConstraintKind::json_schema: {
        nlohmann::json schema = nlohmann::json::parse(c.spec, nullptr, /*allow_exceptions=*/false);
        if (schema.is_discarded())
          return invalid_argument("json_schema: the schema is not valid JSON");
        if (Status s = check_schema_supported(schema); !s.ok())
          return invalid_argument("json_schema: " + s.message());
        compiled =
            xg.CompileJSONSchema(c.spec, any_whitespace, std::nullopt, std::nullopt, c.strict);
        break;
      }
      case ConstraintKind::regex: compiled = xg.CompileRegex(c.spec); break;
      case ConstraintKind::choice: {
        Result<std::string> ebnf = choice_ebnf(c.spec);
        if (!ebnf.ok()) return invalid_argument(field + ": " + ebnf.status().message());
        compiled = xg.CompileGrammar(*ebnf, "root");
        break;
      }
      case ConstraintKind::ebnf: compiled = xg.CompileGrammar(c.spec, "root"); break;
      case ConstraintKind::structural_tag: compiled = xg.CompileStructuralTag(c.spec); break;
      case ConstraintKind::none: return invalid_argument("no constraint to compile");
    }
    auto impl = std::make_unique<CompiledGrammar::Impl>(
        CompiledGrammar::Impl{std::move(*compiled), source_.vocab_size});
    return std::make_shared<const CompiledGrammar>(std::move(impl));
  } catch (const std::exception& e) {
    return invalid_argument(field + ": " + xgrammar_reason(e));
  }
}

}  // namespace vpod::grammar
