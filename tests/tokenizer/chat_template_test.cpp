// ChatTemplate's own contract: reading tokenizer_config.json (string and
// named-list templates, special tokens as strings or objects), content
// parts, argument validation, and the error for models without a template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_test_util.h"

namespace vpod::tokenizer {
namespace {

using nlohmann::ordered_json;

ordered_json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

TEST(ChatTemplate, ReadsSpecialTokensAsStringsOrObjects) {
  auto chat = ChatTemplate::from_config(ordered_json::parse(R"({
    "bos_token": {"content": "<s>", "lstrip": false, "__type": "AddedToken"},
    "eos_token": "</s>",
    "pad_token": null,
    "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ unk_token is defined }}"
  })"));
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(chat->bos_token(), "<s>");
  EXPECT_EQ(chat->eos_token(), "</s>");
  auto r = chat->render(ordered_json::array({user("x")}), false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "<s>|</s>|False|False");
}

TEST(ChatTemplate, NamedTemplatesPickDefaultOrToolUse) {
  auto chat = ChatTemplate::from_config(ordered_json::parse(R"({
    "chat_template": [
      {"name": "default", "template": "default:{{ messages | length }}"},
      {"name": "tool_use", "template": "tools:{{ tools | length }}"},
      {"name": "rag", "template": "rag"}
    ]
  })"));
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  const ordered_json messages = ordered_json::array({user("a"), user("b")});
  EXPECT_EQ(chat->render(messages, false).value(), "default:2");
  ChatRenderOptions options;
  options.tools = ordered_json::array({{{"type", "function"}}});
  EXPECT_EQ(chat->render(messages, false, options).value(), "tools:1");

  auto no_default = ChatTemplate::from_config(
      ordered_json::parse(R"({"chat_template": [{"name": "rag", "template": "x"}]})"));
  EXPECT_FALSE(no_default.ok());
}

TEST(ChatTemplate, ModelWithoutTemplateGetsAClearError) {
  auto chat = ChatTemplate::from_config(ordered_json::parse(R"({"eos_token": "</s>"})"));
  ASSERT_TRUE(chat.ok());
  EXPECT_FALSE(chat->has_template());
  auto r = chat->render(ordered_json::array({user("hi")}), true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::failed_precondition);
  EXPECT_NE(r.status().message().find("no chat template"), std::string::npos);
}

TEST(ChatTemplate, TemplateErrorsSurfaceAtLoad) {
  auto chat = ChatTemplate::from_config(ordered_json::parse(
      R"({"chat_template": "line1\n{% for m in messages %}{{ m | nosuch }}"})"));
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.status().message().find("line 2"), std::string::npos) << chat.status().message();
}

TEST(ChatTemplate, JoinsTextPartsForStringTemplatesAndPassesThemOtherwise) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
  ])");
  auto joins = ChatTemplate::from_config(ordered_json::parse(
      R"({"chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}"})"));
  ASSERT_TRUE(joins.ok());
  EXPECT_FALSE(joins->takes_content_parts());
  EXPECT_EQ(joins->render(messages, false).value(), "[a\nb]");

  auto iterates = ChatTemplate::from_config(ordered_json::parse(
      R"({"chat_template": "{% for m in messages %}{% for p in m.content %}<{{ p.text }}>{% endfor %}{% endfor %}"})"));
  ASSERT_TRUE(iterates.ok());
  EXPECT_TRUE(iterates->takes_content_parts());
  EXPECT_EQ(iterates->render(messages, false).value(), "<a><b>");

  const ordered_json image = ordered_json::parse(R"([
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
  ])");
  auto r = joins->render(image, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("image_url"), std::string::npos) << r.status().message();
}

TEST(ChatTemplate, ValidatesArguments) {
  auto chat = ChatTemplate::from_config(ordered_json::parse(R"({"chat_template": "x"})"));
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->render(ordered_json::object(), false).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(chat->render(ordered_json::array({{{"content", "no role"}}}), false).status().code(),
            StatusCode::invalid_argument);
  ChatRenderOptions options;
  options.continue_final_message = true;
  EXPECT_EQ(chat->render(ordered_json::array({user("x")}), true, options).status().code(),
            StatusCode::invalid_argument);
  ChatRenderOptions reserved;
  reserved.extra_vars = {{"messages", 1}};
  EXPECT_EQ(chat->render(ordered_json::array({user("x")}), false, reserved).status().code(),
            StatusCode::invalid_argument);
  EXPECT_FALSE(ChatTemplate::from_config(ordered_json::parse(R"({"chat_template": 5})")).ok());
  EXPECT_FALSE(ChatTemplate::from_config(ordered_json::parse(R"({"bos_token": 5})")).ok());
}

TEST(ChatTemplate, LoadPrefersChatTemplateJinja) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("vpod_chat_template_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "from config", "eos_token": "E"})";
  {
    auto chat = ChatTemplate::load(dir);
    ASSERT_TRUE(chat.ok()) << chat.status().to_string();
    EXPECT_EQ(chat->render(ordered_json::array(), false).value(), "from config");
  }
  std::ofstream(dir / "chat_template.jinja") << "from file {{ eos_token }}\n";
  {
    auto chat = ChatTemplate::load(dir);
    ASSERT_TRUE(chat.ok()) << chat.status().to_string();
    EXPECT_EQ(chat->render(ordered_json::array(), false).value(), "from file E");
  }
  std::filesystem::remove_all(dir);
  auto missing = ChatTemplate::load(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
}

}  // namespace
}  // namespace vpod::tokenizer
