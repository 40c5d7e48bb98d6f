// libFuzzer target: the Jinja chat-template engine (src/tokenizer/jinja) on
// arbitrary template text, and ChatTemplate on arbitrary message JSON. Any
// input must give a rendering or an error Status: never a crash, hang,
// stack overflow or unbounded allocation (run under ASan: cmake -DVPOD_FUZZ=ON
// with clang; seeds: tests/tokenizer/data/chat/templates, dictionary:
// tools/fuzz/chat_template.dict).
//
// An input starting with '[' is a JSON message list, rendered with a fixed
// tool-calling template; anything else is a template, rendered against a
// fixed conversation (so template files are seeds as they are).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/template.h"

namespace {

using nlohmann::ordered_json;
using vpod::tokenizer::jinja::RenderOptions;
using vpod::tokenizer::jinja::Template;

// Small limits keep each execution fast; the limits themselves are what
// must hold.
RenderOptions small_limits() {
  RenderOptions options;
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_allocated_bytes = 32 << 20;
  options.now = 1721999109;  // deterministic strftime_now
  return options;
}

const ordered_json& conversation() {
  static const ordered_json vars = ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What's the weather in \"Paris\"?\n"},
      {"role": "assistant", "content": "<think>\nlook it up\n</think>\n\n", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "21C"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "text", "text": "😀"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return vars;
}

const vpod::tokenizer::ChatTemplate& tool_template() {
  static const auto chat = vpod::tokenizer::ChatTemplate::from_config(ordered_json::parse(R"({
    "eos_token": "<|im_end|>",
    "chat_template": "{%- if tools %}{{ tools | tojson(indent=2) }}{% endif %}{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{{ '<|im_start|>' + m.role + '\n' }}{%- if m.content is string %}{{ m.content.split('</think>')[-1].strip() }}{%- else %}{{ m.content | tojson }}{% endif %}{%- for tc in m.tool_calls | default([]) %}{{ tc.function.name }}{{ tc.function.arguments | tojson }}{% endfor %}{{ eos_token }}{%- endfor %}{{ ns.last }}"
  })"));
  VPOD_CHECK(chat.ok());
  return *chat;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.empty() || input[0] != '[') {
    auto parsed = Template::parse(input);
    if (!parsed.ok()) {
      VPOD_CHECK(!parsed.status().message().empty());
      return 0;
    }
    const auto options = small_limits();
    auto first = parsed->render(conversation(), options);
    auto second = parsed->render(conversation(), options);
    // Rendering is deterministic.
    VPOD_CHECK(first.ok() == second.ok());
    if (first.ok()) {
      VPOD_CHECK(*first == *second);
      VPOD_CHECK(first->size() <= options.limits.max_output_bytes);
    }
    return 0;
  }
  const ordered_json messages = ordered_json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return 0;
  vpod::tokenizer::ChatRenderOptions options;
  options.limits = small_limits().limits;
  options.now = 1721999109;
  auto rendered = tool_template().render(messages, true, options);
  if (!rendered.ok()) VPOD_CHECK(!rendered.status().message().empty());
  return 0;
}
