// GrammarCompiler: the cache (hits, keys, the LRU bound) and the errors a
// client gets for specs that cannot be compiled or cannot be enforced.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar_cache.h"
#include "grammar/grammar_compiler.h"
#include "grammar/schema_check.h"
#include "grammar_support.h"

namespace vpod::grammar {
namespace {

using testing::llama3_compiler;
using testing::llama3_source;

TEST(GrammarCompiler, CachesByKindSpecStrictAndWhitespace) {
  VPOD_REQUIRE_LLAMA3();
  GrammarCompiler& c = llama3_compiler();
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";
  const GrammarCacheStats before = c.cache_stats();
  auto a = c.compile({ConstraintKind::json_schema, schema, true});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto again = c.compile({ConstraintKind::json_schema, schema, true});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a.value().get(), again.value().get());
  auto loose = c.compile({ConstraintKind::json_schema, schema, false});
  ASSERT_TRUE(loose.ok());
  EXPECT_NE(a.value().get(), loose.value().get());
  auto as_regex = c.compile({ConstraintKind::regex, "a+", true});
  ASSERT_TRUE(as_regex.ok());
  auto compact = c.compile({ConstraintKind::json_schema, schema, true, /*any_whitespace=*/false});
  ASSERT_TRUE(compact.ok());
  EXPECT_NE(a.value().get(), compact.value().get());
  const GrammarCacheStats after = c.cache_stats();
  EXPECT_EQ(after.hits - before.hits, 1);
  EXPECT_EQ(after.misses - before.misses, 4);
}

TEST(GrammarCompiler, EvictsTheLeastRecentlyUsedPastItsBound) {
  VPOD_REQUIRE_LLAMA3();
  GrammarCompiler c(llama3_source(), {.max_cached_grammars = 2});
  auto compile = [&](const char* regex) {
    auto g = c.compile({ConstraintKind::regex, regex, true});
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    return g.ok() ? g.value() : nullptr;
  };
  auto a = compile("a");
  auto b = compile("b");
  EXPECT_EQ(compile("a").get(), a.get());  // a is now the most recent
  compile("c");                            // evicts b
  EXPECT_EQ(c.cache_stats().size, 2u);
  EXPECT_EQ(compile("a").get(), a.get());
  EXPECT_NE(compile("b").get(), b.get());  // compiled again (b itself lives on with its holders)
}

TEST(GrammarCache, LruAlone) {
  GrammarCache cache(2);
  const Constraint x{ConstraintKind::regex, "x", true};
  const Constraint y{ConstraintKind::regex, "y", true};
  const Constraint z{ConstraintKind::regex, "z", true};
  EXPECT_EQ(cache.find(x), nullptr);
  cache.insert(x, nullptr);  // the cache stores what it is given
  EXPECT_EQ(cache.stats().size, 1u);
  cache.insert(y, nullptr);
  cache.insert(z, nullptr);
  EXPECT_EQ(cache.stats().size, 2u);
  EXPECT_EQ(cache.stats().misses, 1);
}

void expect_error(const Constraint& c, const std::string& needle) {
  auto g = llama3_compiler().compile(c);
  ASSERT_FALSE(g.ok()) << "compiled: " << c.spec;
  EXPECT_EQ(g.status().code(), StatusCode::invalid_argument) << g.status().to_string();
  EXPECT_NE(g.status().message().find(needle), std::string::npos)
      << "'" << g.status().message() << "' lacks '" << needle << "'";
}

TEST(GrammarCompiler, BadSpecsSayWhy) {
  VPOD_REQUIRE_LLAMA3();
  expect_error({ConstraintKind::json_schema, "{\"type\": ", true}, "not valid JSON");
  expect_error({ConstraintKind::json_schema, R"({"type": "frobnicate"})", true}, "json_schema:");
  expect_error(
      {ConstraintKind::json_schema,
       R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})",
       true},
      "'uniqueItems' at /properties/tags");
  expect_error({ConstraintKind::json_schema, R"({"$ref": "https://example.com/s.json"})", true},
               "'$ref'");
  expect_error({ConstraintKind::regex, "(unclosed", true}, "regex:");
  expect_error({ConstraintKind::ebnf, "root ::= undefined_rule", true}, "grammar:");
  expect_error({ConstraintKind::choice, "[]", true}, "choice");
  expect_error({ConstraintKind::structural_tag, "{\"type\": \"nonsense\"}", true},
               "structural_tag:");
}

TEST(GrammarCompiler, WithoutATokenizerRefusesClearly) {
  GrammarCompiler c(VocabularySource{});
  auto g = c.compile({ConstraintKind::regex, "a", true});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::failed_precondition);
  EXPECT_NE(g.status().message().find("tokenizer"), std::string::npos);
}

TEST(SchemaCheck, RefusesWhatXgrammarWouldIgnore) {
  auto check = [](const char* schema) {
    return check_schema_supported(nlohmann::json::parse(schema));
  };
  EXPECT_TRUE(
      check(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$"}},
                        "$defs": {"x": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/x"}]}}})")
          .ok());
  EXPECT_TRUE(check(R"({"type": "integer", "multipleOf": 5})").ok());
  EXPECT_TRUE(check(R"({"type": "array", "uniqueItems": false})").ok());
  EXPECT_TRUE(check("true").ok());
  for (const char* bad : {R"({"not": {"type": "string"}})", R"({"if": {}, "then": {}})",
                          R"({"type": "array", "contains": {"type": "integer"}})",
                          R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})",
                          R"({"type": "number", "multipleOf": 0.5})",
                          R"({"type": "integer", "multipleOf": 5, "minimum": 3})",
                          R"({"type": "string", "format": "email", "maxLength": 20})",
                          R"({"dependentRequired": {"a": ["b"]}})",
                          R"({"properties": {"a~b/c": {"items": [{"not": {}}]}}})", "[1]"}) {
    const Status s = check(bad);
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << bad;
  }
  const Status s = check(R"({"properties": {"a~b/c": {"items": [{"not": {}}]}}})");
  EXPECT_NE(s.message().find("/properties/a~0b~1c/items/0"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vpod::grammar
