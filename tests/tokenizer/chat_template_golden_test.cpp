// Chat templates against Python jinja2 with Hugging Face's settings: the
// fixtures' tokenizer_config.json templates (Llama-3, Qwen3; Mistral has
// none) and the templates in tests/tokenizer/data/chat/templates, over the
// conversations in conversations.json and random_conversations.json. chat_goldens.json is generated
// by tools/chat_template/make_goldens.py.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_test_util.h"

namespace vpod::tokenizer {
namespace {

using nlohmann::ordered_json;
namespace test = jinja::test;

// FNV-1a 64, as make_goldens.py records it: the goldens were made from this
// exact template text.
std::string fnv1a64(const std::string& data) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : data) h = (h ^ c) * 0x100000001B3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

struct Loaded {
  ChatTemplate chat;
  std::optional<std::string> source;  // the template text, when there is one
};

// fixture:<model> loads through ChatTemplate::load from the fixture folder;
// repo:<name> from the .jinja file and its .tokens.json.
Result<Loaded> load_template(const std::string& name) {
  if (name.rfind("fixture:", 0) == 0) {
    const auto dir = test::fixtures_dir() / "tokenizers" / name.substr(8);
    VPOD_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::load(dir));
    const ordered_json config = test::load_json(dir / "tokenizer_config.json");
    std::optional<std::string> source;
    if (config.contains("chat_template") && config["chat_template"].is_string()) {
      source = config["chat_template"].get<std::string>();
    }
    return Loaded{std::move(chat), source};
  }
  const auto base = test::chat_data_dir() / "templates" / name.substr(5);
  const std::string source = test::read_text(base.string() + ".jinja");
  ordered_json config = test::load_json(base.string() + ".tokens.json");
  config["chat_template"] = source;
  VPOD_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::from_config(config));
  return Loaded{std::move(chat), source};
}

void run_goldens(const std::string& prefix) {
  const ordered_json goldens = test::load_json(test::chat_data_dir() / "chat_goldens.json");
  std::map<std::string, ordered_json> conversations;
  for (const char* file : {"conversations.json", "random_conversations.json"}) {
    for (const auto& c : test::load_json(test::chat_data_dir() / file))
      conversations[c["name"]] = c;
  }
  int templates_checked = 0;
  int cases_checked = 0;
  for (const auto& [name, info] : goldens["templates"].items()) {
    if (name.rfind(prefix, 0) != 0) continue;
    SCOPED_TRACE("template " + name);
    auto loaded = load_template(name);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const ChatTemplate& chat = loaded->chat;
    ASSERT_EQ(chat.has_template(), info["has_template"].get<bool>());
    ++templates_checked;
    if (!chat.has_template()) {
      // Mistral's fixture has no template: chat requests get a clear error.
      auto r = chat.render(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), true);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::failed_precondition);
      EXPECT_NE(r.status().message().find("no chat template"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(loaded->source.has_value());
    ASSERT_EQ(fnv1a64(*loaded->source), info["fnv1a64"].get<std::string>())
        << "the template changed since the goldens were made; rerun "
           "tools/chat_template/make_goldens.py";
    EXPECT_EQ(chat.takes_content_parts(), info["iterates_message_content"].get<bool>());
    for (const auto& c : goldens["cases"]) {
      if (c["template"] != name) continue;
      const ordered_json& conv = conversations.at(c["conversation"].get<std::string>());
      const bool add_generation_prompt = c["add_generation_prompt"];
      SCOPED_TRACE("conversation " + c["conversation"].get<std::string>() +
                   (add_generation_prompt ? " +generation prompt" : ""));
      ChatRenderOptions options;
      options.now = test::golden_now();
      if (conv.contains("tools")) options.tools = conv["tools"];
      if (conv.contains("extra")) options.extra_vars = conv["extra"];
      options.continue_final_message = c.value("continue_final_message", false);
      auto rendered = chat.render(conv["messages"], add_generation_prompt, options);
      if (c.contains("expected")) {
        ASSERT_TRUE(rendered.ok()) << rendered.status().to_string();
        EXPECT_EQ(*rendered, c["expected"].get<std::string>());
      } else {
        ASSERT_FALSE(rendered.ok()) << *rendered;
        if (c["error"]["kind"] == "continue_final_message") {
          EXPECT_EQ(rendered.status().code(), StatusCode::invalid_argument);
        } else {
          test::expect_same_error(c["error"], rendered.status(), false);
        }
      }
      ++cases_checked;
    }
  }
  EXPECT_GT(templates_checked, 0);
  std::printf("%s: %d templates, %d renderings compared\n", prefix.c_str(), templates_checked,
              cases_checked);
}

TEST(ChatTemplateGolden, FixtureTemplatesMatchJinja2) {
  if (!std::filesystem::exists(test::fixtures_dir() / "tokenizers")) {
    GTEST_SKIP() << "fixtures not found at " << test::fixtures_dir()
                 << " (CI clones them beside the repository as ../shared/fixtures)";
  }
  run_goldens("fixture:");
}

TEST(ChatTemplateGolden, RepoTemplatesMatchJinja2) { run_goldens("repo:"); }

}  // namespace
}  // namespace vpod::tokenizer
