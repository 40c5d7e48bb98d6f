// Matchers and their token bitmasks over the Llama-3 vocabulary: which ids a
// choice, a regex and a JSON schema allow, completion and the stop tokens,
// random walks whose outputs parse, and the parallel filler.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "grammar/grammar_state.h"
#include "grammar/mask_workers.h"
#include "grammar/matcher.h"
#include "grammar_support.h"

namespace vpod::grammar {
namespace {

using testing::llama3_compiler;
using testing::llama3_tokenizer;

std::vector<std::int32_t> allowed_ids(Matcher& m) {
  std::vector<std::uint32_t> row(static_cast<std::size_t>(token_bitmask_words(m.vocab_size())));
  m.fill_bitmask(row);
  std::vector<std::int32_t> ids;
  for (int id = 0; id < m.vocab_size(); ++id)
    if ((row[static_cast<std::size_t>(id / 32)] >> (id % 32)) & 1u) ids.push_back(id);
  return ids;
}

std::string text_of(std::int32_t id) {
  const std::vector<std::int32_t> one = {id};
  auto text = llama3_tokenizer()->decode(one, /*skip_special_tokens=*/false);
  return text.ok() ? text.value() : "";
}

std::unique_ptr<Matcher> matcher_of(ConstraintKind kind, std::string spec, bool strict = true) {
  auto m = llama3_compiler().make_matcher({kind, std::move(spec), strict});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// vLLM's disable_any_whitespace: after "{" any-whitespace JSON allows a
// space, compact JSON does not (and still allows the closing brace).
TEST(Matcher, CompactJsonAllowsNoWhitespace) {
  VPOD_REQUIRE_LLAMA3();
  const std::int32_t space = llama3_tokenizer()->token_to_id("\xc4\xa0");  // " " (byte-level)
  const std::int32_t open = llama3_tokenizer()->token_to_id("{");
  const std::int32_t close = llama3_tokenizer()->token_to_id("}");
  ASSERT_GE(space, 0);
  ASSERT_GE(open, 0);
  ASSERT_GE(close, 0);
  for (bool any : {true, false}) {
    auto m = llama3_compiler().make_matcher(
        {ConstraintKind::json_object, "", /*strict=*/false, /*any_whitespace=*/any});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_TRUE((*m)->accept(open));
    const std::vector<std::int32_t> next = allowed_ids(**m);
    EXPECT_EQ(std::find(next.begin(), next.end(), space) != next.end(), any) << any;
    EXPECT_TRUE(std::find(next.begin(), next.end(), close) != next.end()) << any;
  }
}

TEST(Matcher, ChoiceAllowsPrefixesThenOnlyStopTokens) {
  VPOD_REQUIRE_LLAMA3();
  auto m = matcher_of(ConstraintKind::choice, R"(["yes", "no"])");
  ASSERT_TRUE(m);
  const std::vector<std::int32_t> first = allowed_ids(*m);
  ASSERT_FALSE(first.empty());
  for (std::int32_t id : first) {
    const std::string t = text_of(id);
    EXPECT_TRUE(!t.empty() &&
                (std::string("yes").rfind(t, 0) == 0 || std::string("no").rfind(t, 0) == 0))
        << "id " << id << " '" << t << "'";
    EXPECT_LT(id, static_cast<int>(llama3_tokenizer()->vocab_size()));
  }
  const std::int32_t yes = llama3_tokenizer()->token_to_id("yes");
  EXPECT_TRUE(std::find(first.begin(), first.end(), yes) != first.end());
  EXPECT_FALSE(m->completed());
  EXPECT_FALSE(m->accept(llama3_tokenizer()->token_to_id("maybe")));  // refused, state kept
  ASSERT_TRUE(m->accept(yes));
  EXPECT_TRUE(m->completed());
  EXPECT_FALSE(m->terminated());
  // Complete: only the stop tokens may follow.
  const std::vector<std::int32_t> stops = llama3_compiler().stop_token_ids();
  std::vector<std::int32_t> sorted_stops = stops;
  std::sort(sorted_stops.begin(), sorted_stops.end());
  EXPECT_EQ(allowed_ids(*m), sorted_stops);
  EXPECT_FALSE(m->accept(yes));
  ASSERT_TRUE(m->accept(stops[0]));
  EXPECT_TRUE(m->terminated());
  EXPECT_FALSE(m->accept(stops[1]));  // nothing after the end
}

TEST(Matcher, StopTokensAreRefusedBeforeCompletion) {
  VPOD_REQUIRE_LLAMA3();
  auto m = matcher_of(ConstraintKind::regex, "[0-9]{3}");
  ASSERT_TRUE(m);
  const std::int32_t eot = llama3_compiler().stop_token_ids()[0];
  EXPECT_FALSE(m->accept(eot));
  for (std::int32_t id : allowed_ids(*m)) {
    const std::string t = text_of(id);
    EXPECT_TRUE(!t.empty() && t.size() <= 3 &&
                std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << "'" << t << "'";
  }
  // Ids past the tokenizer (the LM head's padding rows) are never allowed.
  EXPECT_FALSE(m->accept(static_cast<std::int32_t>(llama3_tokenizer()->vocab_size()) + 3));
}

// Whether each token's text has a visible (non-whitespace) character.
const std::vector<char>& visible_tokens() {
  static const std::vector<char> visible = [] {
    std::vector<char> v(llama3_tokenizer()->vocab_size());
    for (std::size_t id = 0; id < v.size(); ++id) {
      const std::string t = text_of(static_cast<std::int32_t>(id));
      v[id] = t.find_first_not_of(" \t\n\r") != std::string::npos;
    }
    return v;
  }();
  return visible;
}

// Walks a grammar with random allowed tokens until it terminates: a stop
// token as soon as one is allowed; else, half the time, a closing `"`, `}`
// or `]` when allowed (so free strings and containers end); else a random
// allowed token with visible text (so whitespace does not dominate). The text.
std::string random_walk(Matcher& m, std::uint32_t seed, int max_steps = 400) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> tokens;
  const auto& stops = m.stop_token_ids();
  const auto& visible = visible_tokens();
  std::vector<std::int32_t> closers;
  for (const char* c : {"\"", "}", "]"}) closers.push_back(llama3_tokenizer()->token_to_id(c));
  for (int step = 0; step < max_steps && !m.terminated(); ++step) {
    const std::vector<std::int32_t> ids = allowed_ids(m);
    EXPECT_FALSE(ids.empty());
    if (ids.empty()) break;
    auto allowed = [&](std::int32_t id) { return std::binary_search(ids.begin(), ids.end(), id); };
    std::int32_t pick = -1;
    for (std::int32_t id : stops)
      if (allowed(id)) pick = id;
    if (pick < 0 && rng() % 2 == 0) {
      std::vector<std::int32_t> open;
      for (std::int32_t id : closers)
        if (allowed(id)) open.push_back(id);
      if (!open.empty()) pick = open[rng() % open.size()];
    }
    if (pick < 0) {
      std::vector<std::int32_t> shown;
      for (std::int32_t id : ids)
        if (static_cast<std::size_t>(id) < visible.size() && visible[static_cast<std::size_t>(id)])
          shown.push_back(id);
      const std::vector<std::int32_t>& from = shown.empty() ? ids : shown;
      pick = from[rng() % from.size()];
    }
    EXPECT_TRUE(m.accept(pick)) << "an allowed token was refused: " << pick;
    if (std::find(stops.begin(), stops.end(), pick) == stops.end()) tokens.push_back(pick);
  }
  EXPECT_TRUE(m.terminated()) << "no end within " << max_steps << " tokens";
  auto text = llama3_tokenizer()->decode(tokens, true);
  return text.ok() ? text.value() : "";
}

TEST(Matcher, RandomWalksOfAJsonSchemaParseAndObeyIt) {
  VPOD_REQUIRE_LLAMA3();
  const std::string schema = R"({
    "type": "object",
    "properties": {
      "ok": {"type": "boolean"},
      "n": {"type": "integer", "minimum": 0, "maximum": 99},
      "color": {"enum": ["red", "green", "blue"]},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}
    },
    "required": ["ok", "n", "color", "tags"],
    "additionalProperties": false
  })";
  for (std::uint32_t seed = 0; seed < 6; ++seed) {
    auto m = matcher_of(ConstraintKind::json_schema, schema);
    ASSERT_TRUE(m);
    const std::string text = random_walk(*m, seed);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_EQ(j.size(), 4u) << text;
    EXPECT_TRUE(j.at("ok").is_boolean()) << text;
    EXPECT_TRUE(j.at("n").is_number_integer() && j["n"] >= 0 && j["n"] <= 99) << text;
    const std::set<std::string> colors = {"red", "green", "blue"};
    EXPECT_TRUE(colors.count(j.at("color").get<std::string>())) << text;
    EXPECT_LE(j.at("tags").size(), 3u) << text;
  }
}

TEST(Matcher, JsonObjectAllowsOnlyAnObject) {
  VPOD_REQUIRE_LLAMA3();
  auto m = matcher_of(ConstraintKind::json_object, "", false);
  ASSERT_TRUE(m);
  for (std::int32_t id : allowed_ids(*m)) {
    const std::string t = text_of(id);
    const std::size_t first = t.find_first_not_of(" \t\n\r");
    EXPECT_TRUE(first == std::string::npos || t[first] == '{') << "'" << t << "'";
  }
  const std::string text = random_walk(*m, 7, 600);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  EXPECT_TRUE(j.is_object()) << text;
}

TEST(Matcher, EbnfGrammar) {
  VPOD_REQUIRE_LLAMA3();
  auto m = matcher_of(ConstraintKind::ebnf, R"(root ::= "SELECT " col (", " col)* ";"
col ::= "id" | "name" | "age")");
  ASSERT_TRUE(m);
  for (std::uint32_t seed = 0; seed < 4; ++seed) {
    auto walk = matcher_of(ConstraintKind::ebnf, R"(root ::= "SELECT " col (", " col)* ";"
col ::= "id" | "name" | "age")");
    const std::string text = random_walk(*walk, seed);
    EXPECT_EQ(text.rfind("SELECT ", 0), 0u) << text;
    EXPECT_EQ(text.back(), ';') << text;
  }
}

// Runs every state's job on `workers` and waits for all of them.
void run_jobs(MaskWorkers& workers, std::vector<std::shared_ptr<GrammarState>>& states,
              const std::vector<std::vector<std::int32_t>>& outputs) {
  for (std::size_t i = 0; i < states.size(); ++i) workers.submit(*states[i], outputs[i]);
  for (;;) {
    const std::uint64_t seen = workers.completions();
    if (std::none_of(states.begin(), states.end(), [](const auto& g) { return g->busy.load(); }))
      return;
    workers.wait_for_completion(seen, std::chrono::milliseconds(10));
  }
}

// The pool's masks equal one thread's, for matchers in different states,
// and each job first accepts the outputs its matcher has not seen.
TEST(MaskWorkers, ParallelJobsEqualSerial) {
  VPOD_REQUIRE_LLAMA3();
  const char* kinds[] = {R"(["alpha", "beta", "gamma"])", R"(["x1", "x22"])"};
  auto make = [&](int i) {
    return i % 3 == 2 ? matcher_of(ConstraintKind::json_object, "", false)
                      : matcher_of(ConstraintKind::choice, kinds[i % 2]);
  };
  // Outputs: none, or the first allowed token (accepted by the job).
  std::vector<std::vector<std::int32_t>> outputs;
  for (int i = 0; i < 12; ++i) {
    auto m = make(i);
    ASSERT_TRUE(m);
    outputs.push_back(i % 4 == 1 ? std::vector<std::int32_t>{allowed_ids(*m)[0]}
                                 : std::vector<std::int32_t>{});
  }
  auto fresh = [&] {
    std::vector<std::shared_ptr<GrammarState>> states;
    for (int i = 0; i < 12; ++i) {
      states.push_back(std::make_shared<GrammarState>(make(i)));
      std::fill(states.back()->mask.begin(), states.back()->mask.end(), 0xdeadbeef);
    }
    return states;
  };
  MaskWorkers one(1);
  auto serial = fresh();
  run_jobs(one, serial, outputs);
  MaskWorkers four(4);
  for (int round = 0; round < 3; ++round) {  // the pool is reused across steps
    auto parallel = fresh();
    run_jobs(four, parallel, outputs);
    for (std::size_t i = 0; i < serial.size(); ++i) {
      EXPECT_FALSE(parallel[i]->rejected);
      EXPECT_EQ(parallel[i]->mask_for, static_cast<int>(outputs[i].size()));
      EXPECT_EQ(parallel[i]->accepted, static_cast<int>(outputs[i].size()));
      EXPECT_EQ(serial[i]->mask, parallel[i]->mask) << "round " << round << " row " << i;
    }
  }
  // Accepting by hand gives the job's mask.
  auto by_hand = make(1);
  ASSERT_TRUE(by_hand->accept(outputs[1][0]));
  std::vector<std::uint32_t> expected(serial[1]->mask.size());
  by_hand->fill_bitmask(expected);
  EXPECT_EQ(serial[1]->mask, expected);
}

// A refused output flags the state and leaves an all-allowed mask (the
// engine fails that request; the step still samples).
TEST(MaskWorkers, RefusedOutputFlagsTheState) {
  VPOD_REQUIRE_LLAMA3();
  auto probe = matcher_of(ConstraintKind::choice, R"(["alpha", "beta"])");
  ASSERT_TRUE(probe);
  std::vector<std::uint32_t> start(token_bitmask_words(probe->vocab_size()));
  probe->fill_bitmask(start);
  std::int32_t bad = -1;
  for (std::int32_t id = 0; id < probe->vocab_size() && bad < 0; ++id) {
    if (((start[id / 32] >> (id % 32)) & 1u) == 0) bad = id;
  }
  ASSERT_GE(bad, 0);
  std::vector<std::shared_ptr<GrammarState>> states = {
      std::make_shared<GrammarState>(matcher_of(ConstraintKind::choice, R"(["alpha", "beta"])"))};
  std::fill(states[0]->mask.begin(), states[0]->mask.end(), 0u);
  MaskWorkers workers(2);
  run_jobs(workers, states, {{bad}});
  EXPECT_TRUE(states[0]->rejected);
  EXPECT_TRUE(std::all_of(states[0]->mask.begin(), states[0]->mask.end(),
                          [](std::uint32_t w) { return w == ~std::uint32_t{0}; }));
}

// A job may outlive its request: the state stays alive while the job runs.
TEST(MaskWorkers, JobKeepsItsStateAlive) {
  VPOD_REQUIRE_LLAMA3();
  MaskWorkers workers(1);
  std::weak_ptr<GrammarState> watch;
  {
    auto g = std::make_shared<GrammarState>(matcher_of(ConstraintKind::json_object, "", false));
    watch = g;
    workers.submit(*g, {});
  }  // the request's reference is gone; the job's remains until it finishes
  // The job drops its reference just after it counts as completed.
  for (int i = 0; i < 10000 && !watch.expired(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace vpod::grammar
