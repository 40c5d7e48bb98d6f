// The Jinja engine's own behaviour beyond the jinja2 goldens: error messages
// name the template line and the construct, unsupported constructs fail at
// parse time, hostile templates hit limits instead of hanging or crashing,
// and a parsed template renders concurrently.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/template.h"

namespace vpod::tokenizer::jinja {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(const std::string& source,
                           const ordered_json& vars = ordered_json::object(),
                           const RenderOptions& options = {}) {
  VPOD_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  return t.render(vars, options);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(Jinja, RendersTheBasics) {
  auto r = render("{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}",
                  {{"messages", {{{"role", "user"}, {"content", "  hi  "}}}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "user: hi\n");
}

TEST(Jinja, SyntaxErrorsNameTheLineAndTheProblem) {
  auto t = Template::parse("line 1\n{% if x %}\n{{ x + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(contains(t.status().message(), "at line 3")) << t.status().message();

  t = Template::parse("a\nb\n{% for x in xs %}\n{{ x }}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.status().message(), "Unexpected end of template")) << t.status().message();
  EXPECT_TRUE(contains(t.status().message(), "'endfor'")) << t.status().message();

  t = Template::parse("\n\n\n{{ x | no_such_filter }}");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.status().message(), "at line 4: No filter named 'no_such_filter'"))
      << t.status().message();
}

TEST(Jinja, UnsupportedConstructsFailAtParseTimeNamingThem) {
  struct Case {
    const char* source;
    const char* named;
    int line;
  };
  const Case cases[] = {
      {"{% extends 'base.html' %}", "tag 'extends'", 1},
      {"x\n{% include 'other' %}", "tag 'include'", 2},
      {"\n\n{% import 'm' as m %}", "tag 'import'", 3},
      {"{% block body %}{% endblock %}", "tag 'block'", 1},
      {"{{ s | truncate(5) }}", "filter 'truncate'", 1},
      {"a\n{{ items | groupby('k') }}", "filter 'groupby'", 2},
      {"{% for x in tree recursive %}{% endfor %}", "recursive loops", 1},
      {"{{ f(*args) }}", "*args", 1},
  };
  for (const auto& c : cases) {
    auto t = Template::parse(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), StatusCode::unimplemented) << t.status().to_string();
    EXPECT_TRUE(contains(t.status().message(), c.named)) << t.status().message();
    EXPECT_TRUE(contains(t.status().message(), "at line " + std::to_string(c.line)))
        << t.status().message();
  }
  // Runtime-only: printf-style formatting and str.format are refused, not guessed.
  auto r = render("{{ '%s' % 'x' }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unimplemented);
  r = render("{{ '{}'.format(1) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unimplemented);
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  auto r = render("ok\n{% set d = {} %}\n{{ d.missing.deeper }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(r.status().message(),
            "template error at line 3: 'dict object' has no attribute 'missing'");

  r = render("{% for m in messages %}\n  {{ m.content + 1 }}\n{% endfor %}",
             {{"messages", {{{"content", "x"}}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "at line 2")) << r.status().message();
}

TEST(Jinja, RaiseExceptionCarriesTheTemplatesMessage) {
  auto r = render("{% if messages | length == 0 %}{{ raise_exception('No messages!') }}{% endif %}",
                  {{"messages", ordered_json::array()}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(r.status().message(), "No messages!");
}

TEST(Jinja, StrftimeNowUsesTheGivenTime) {
  std::tm t{};
  t.tm_year = 2025 - 1900;
  t.tm_mon = 1;
  t.tm_mday = 3;
  t.tm_hour = 12;
  t.tm_isdst = -1;
  RenderOptions options;
  options.now = std::mktime(&t);
  auto r = render("{{ strftime_now('%d %b %Y') }}", ordered_json::object(), options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "03 Feb 2025");
}

TEST(Jinja, VariablesMustBeAnObject) {
  auto t = Template::parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->render(ordered_json::array()).status().code(), StatusCode::invalid_argument);
}

TEST(Jinja, KeepsJsonKeyOrder) {
  auto r = render("{{ x | tojson }}{% for k in x %}{{ k }}{% endfor %}",
                  {{"x", ordered_json::parse(R"({"z": 1, "a": 2, "m": 3})")}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, R"({"z": 1, "a": 2, "m": 3}zam)");
}

// ---- limits: hostile templates stop with a Status (400: the request's fault) ----

TEST(JinjaLimits, NestedLoopsStopAtTheStepLimit) {
  RenderOptions options;
  options.limits.max_steps = 1'000'000;
  auto r =
      render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             ordered_json::object(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(contains(r.status().message(), "steps")) << r.status().message();
}

TEST(JinjaLimits, OutputStopsAtTheOutputLimit) {
  RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  auto r = render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
                  ordered_json::object(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(contains(r.status().message(), "output")) << r.status().message();
}

TEST(JinjaLimits, DoublingStringsStopAtTheAllocationLimit) {
  RenderOptions options;
  options.limits.max_allocated_bytes = 64 << 20;
  auto r = render(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor "
      "%}{{ ns.s | length }}",
      ordered_json::object(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  r = render("{{ 'x' * 9223372036854775807 }}", ordered_json::object(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  r = render("{{ ([1] * 100000000) | length }}", ordered_json::object(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
}

TEST(JinjaLimits, InfiniteRecursionStopsAtTheCallDepth) {
  auto r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(contains(r.status().message(), "macro calls nest")) << r.status().message();
}

TEST(JinjaLimits, DeepNestingIsRefusedAtParseTime) {
  const int n = 100000;
  std::vector<std::string> sources = {
      "{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}",
      "{{ " + std::string(n, '[') + std::string(n, ']') + " }}",
      "{{ 1" +
          [&] {
            std::string s;
            for (int i = 0; i < n; ++i) s += "+1";
            return s;
          }() +
          " }}",
      "{{ x" +
          [&] {
            std::string s;
            for (int i = 0; i < n; ++i) s += "|trim";
            return s;
          }() +
          " }}",
      "{{ " +
          [&] {
            std::string s;
            for (int i = 0; i < n; ++i) s += "not ";
            return s;
          }() +
          "x }}",
      [&] {
        std::string s;
        for (int i = 0; i < n; ++i) s += "{% if x %}";
        return s;
      }(),
      "{% set " + std::string(n, '(') + "a" + std::string(n, ')') + " = 1 %}",
  };
  for (const auto& source : sources) {
    auto t = Template::parse(source);
    ASSERT_FALSE(t.ok()) << source.substr(0, 40);
    EXPECT_EQ(t.status().code(), StatusCode::out_of_range) << t.status().to_string();
  }
  // Long flat sequences are fine.
  std::string flat;
  for (int i = 0; i < 20000; ++i) flat += "{% if true %}x{% endif %}";
  auto r = render(flat);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size(), 20000u);
}

TEST(JinjaLimits, RaisedMessagesAreBounded) {
  auto r = render("{{ raise_exception('x' * 50000000) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_LT(r.status().message().size(), 2000u);
  EXPECT_TRUE(contains(r.status().message(), "50000000 bytes")) << r.status().message();
  // A cut never splits a UTF-8 character.
  r = render("{{ raise_exception('\u00e9' * 5000) }}");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(m.substr(0, 2), "\u00e9");
  EXPECT_NE(m.find("... (10000 bytes)"), std::string::npos) << m.substr(m.size() - 40);
}

TEST(JinjaLimits, ConcurrentRendersShareOneBudget) {
  // Each render may allocate 64 MiB alone; together they may hold 96 MiB.
  RenderBudget budget(96 << 20);
  RenderOptions options;
  options.limits.max_allocated_bytes = 64 << 20;
  options.limits.shared_budget = &budget;
  const std::string hog =
      "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}"
      "{% set ns.s = ns.s ~ 'y' %}{% endfor %}{{ ns.s | length }}";
  // Alone, a render within its own limit succeeds and gives everything back.
  auto alone = render(hog, ordered_json::object(), options);
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ(budget.in_use(), 0u);
  // With 60 MiB held by another render, the same render runs out of the
  // shared budget: 503-class (retry), not the request's fault.
  ASSERT_TRUE(budget.try_reserve(60 << 20));
  auto crowded = render(hog, ordered_json::object(), options);
  ASSERT_FALSE(crowded.ok());
  EXPECT_EQ(crowded.status().code(), StatusCode::unavailable) << crowded.status().message();
  budget.release(60 << 20);
  EXPECT_EQ(budget.in_use(), 0u);
  // Many threads at once: never more than the capacity, all returned.
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        auto r = render(hog, ordered_json::object(), options);
        if (!r.ok()) {
          EXPECT_EQ(r.status().code(), StatusCode::unavailable);
        }
        EXPECT_LE(budget.in_use(), budget.capacity());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(JinjaLimits, SelfReferenceIsAnErrorNotACrash) {
  auto r = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  ASSERT_FALSE(r.ok());
  r = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}");
  ASSERT_FALSE(r.ok());
  const ordered_json deep = ordered_json::parse(std::string(5000, '[') + std::string(5000, ']'));
  r = render("{{ x | length }}", {{"x", deep}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
}

TEST(Jinja, OneTemplateRendersFromManyThreads) {
  auto t = Template::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m }}{% "
      "endfor %}={{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> results(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      ordered_json messages = ordered_json::array();
      for (int k = 0; k <= i; ++k) messages.push_back(k);
      for (int rep = 0; rep < 200; ++rep) results[i] = t->render({{"messages", messages}}).value();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(results[0], "0=1");
  EXPECT_EQ(results[3], "0123=4");
}

TEST(Jinja, DetectsTemplatesThatIterateMessageContent) {
  struct Case {
    const char* source;
    bool iterates;
  };
  const Case cases[] = {
      {"{% for m in messages %}{{ m.content }}{% endfor %}", false},
      {"{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}", true},
      {"{% for m in messages %}{% for p in m['content'] | list %}{{ p }}{% endfor %}{% endfor %}",
       true},
      {"{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for p in m.content "
       "%}{% endfor %}{% endfor %}",
       true},
      {"{% for p in content %}{% endfor %}", false},
      {"{% for m in other %}{% for p in m.content %}{% endfor %}{% endfor %}", false},
  };
  for (const auto& c : cases) {
    auto t = Template::parse(c.source);
    ASSERT_TRUE(t.ok()) << c.source;
    EXPECT_EQ(t->iterates_message_content(), c.iterates) << c.source;
  }
}

}  // namespace
}  // namespace vpod::tokenizer::jinja
