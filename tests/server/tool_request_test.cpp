// tools / tool_choice / parallel_tool_calls validation, the output parsing a
// request gets, and the schemas that enforce required and named choices.
#include "server/tool_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace vpod::server {
namespace {

using json = nlohmann::ordered_json;

json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Weather in a city"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}}}}},
              {"required", {"city"}}}}}}};
}

json body(json tools, json choice = nullptr) {
  json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (!tools.is_null()) b["tools"] = std::move(tools);
  if (!choice.is_null()) b["tool_choice"] = std::move(choice);
  return b;
}

void expect_bad(const json& b, const std::string& param) {
  auto r = parse_tool_request(b);
  ASSERT_FALSE(r.ok()) << b.dump();
  EXPECT_EQ(r.error().http_status, 400);
  EXPECT_EQ(r.error().param, param) << r.error().message;
  EXPECT_NE(r.error().message.find(param), std::string::npos) << r.error().message;
}

TEST(ToolRequest, Choices) {
  auto r = parse_tool_request(body(nullptr));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, ToolChoice::none);
  EXPECT_TRUE(r->tools.is_null());

  r = parse_tool_request(body({weather_tool()}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, ToolChoice::automatic);  // tools without tool_choice
  EXPECT_FALSE(r->choice_given);
  EXPECT_EQ(r->tools, json::array({weather_tool()}));  // as given, for the template

  r = parse_tool_request(body({weather_tool()}, "none"));
  EXPECT_EQ(r->choice, ToolChoice::none);
  EXPECT_EQ(r->tools.size(), 1u);  // still rendered
  r = parse_tool_request(body({weather_tool()}, "required"));
  EXPECT_EQ(r->choice, ToolChoice::required);
  r = parse_tool_request(body(json::array(), "required"));  // nothing to call
  EXPECT_EQ(r->choice, ToolChoice::none);
  r = parse_tool_request(
      body({weather_tool()}, {{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, ToolChoice::named);
  EXPECT_EQ(r->function_name, "get_weather");

  json b = body({weather_tool()});
  b["parallel_tool_calls"] = false;
  r = parse_tool_request(b);
  EXPECT_FALSE(r->parallel_tool_calls);
}

TEST(ToolRequest, Validation) {
  expect_bad(body("x"), "tools");
  expect_bad(body({3}), "tools[0]");
  expect_bad(body({{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}), "tools[0].type");
  expect_bad(body({{{"type", "function"}}}), "tools[0].function");
  expect_bad(body({weather_tool(), {{"type", "function"}, {"function", {{"name", ""}}}}}),
             "tools[1].function.name");
  expect_bad(body({{{"type", "function"}, {"function", {{"description", "d"}}}}}),
             "tools[0].function.name");
  expect_bad(body({{{"type", "function"}, {"function", {{"name", "f"}, {"description", 3}}}}}),
             "tools[0].function.description");
  expect_bad(body({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "{}"}}}}}),
             "tools[0].function.parameters");
  expect_bad(body({{{"type", "function"}, {"function", {{"name", "f"}, {"strict", "yes"}}}}}),
             "tools[0].function.strict");
  expect_bad(body(nullptr, "auto"), "tool_choice");
  expect_bad(body(nullptr, "required"), "tool_choice");
  expect_bad(body({weather_tool()}, "sometimes"), "tool_choice");
  expect_bad(body({weather_tool()}, 3), "tool_choice");
  expect_bad(body({weather_tool()}, {{"type", "function"}, {"function", {{"name", "nope"}}}}),
             "tool_choice");
  expect_bad(body({weather_tool()}, {{"type", "function"}}), "tool_choice.function.name");
  expect_bad(body({weather_tool()}, {{"type", "x"}, {"function", {{"name", "get_weather"}}}}),
             "tool_choice.type");
  json b = body({weather_tool()});
  b["parallel_tool_calls"] = "yes";
  expect_bad(b, "parallel_tool_calls");
}

TEST(ToolRequest, AutoNeedsTheServerFlags) {
  auto r = parse_tool_request(body({weather_tool()}));
  ASSERT_TRUE(r.ok());
  ToolServing serving;
  auto config = chat_output_config(r.value(), serving);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().param, "tools");  // tool_choice was implied
  EXPECT_NE(config.error().message.find("--enable-auto-tool-choice"), std::string::npos);
  r = parse_tool_request(body({weather_tool()}, "auto"));
  EXPECT_EQ(chat_output_config(r.value(), serving).error().param, "tool_choice");

  serving.enable_auto_tool_choice = true;
  serving.tool_parser = chat_output::ToolParserKind::hermes;
  config = chat_output_config(r.value(), serving);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->tools, chat_output::ToolMode::parse);
  EXPECT_EQ(config->parser, chat_output::ToolParserKind::hermes);
  engine::StopParams stop;
  adjust_stop_params(config.value(), stop);
  EXPECT_FALSE(stop.skip_special_tokens);  // <tool_call> may be a special token

  // none, required and named need no flags.
  for (json choice : {json("none"), json("required"),
                      json({{"type", "function"}, {"function", {{"name", "get_weather"}}}})}) {
    r = parse_tool_request(body({weather_tool()}, choice));
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(chat_output_config(r.value(), ToolServing{}).ok()) << choice.dump();
  }
  r = parse_tool_request(body({weather_tool()}, "none"));
  EXPECT_FALSE(chat_output_config(r.value(), ToolServing{})->active());
}

TEST(ToolRequest, Constraints) {
  auto r = parse_tool_request(body({weather_tool()}, "auto"));
  EXPECT_FALSE(tool_constraint(r.value())->active());
  r = parse_tool_request(body({weather_tool()}, "none"));
  EXPECT_FALSE(tool_constraint(r.value())->active());

  // Named: the function's parameters.
  r = parse_tool_request(
      body({weather_tool()}, {{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  auto c = tool_constraint(r.value());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, grammar::ConstraintKind::json_schema);
  EXPECT_EQ(json::parse(c->spec), weather_tool()["function"]["parameters"]);

  // Required: a list of {name, parameters}, one schema per tool; $defs hoisted.
  json with_defs = {{"type", "function"},
                    {"function",
                     {{"name", "lookup"},
                      {"parameters",
                       {{"type", "object"},
                        {"properties", {{"item", {{"$ref", "#/$defs/Item"}}}}},
                        {"$defs", {{"Item", {{"type", "string"}}}}}}}}}};
  json no_params = {{"type", "function"}, {"function", {{"name", "ping"}}}};
  r = parse_tool_request(body({weather_tool(), with_defs, no_params}, "required"));
  c = tool_constraint(r.value());
  ASSERT_TRUE(c.ok());
  const json schema = json::parse(c->spec);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  const json& any_of = schema["items"]["anyOf"];
  ASSERT_EQ(any_of.size(), 3u);
  EXPECT_EQ(any_of[0]["properties"]["name"]["enum"], json::array({"get_weather"}));
  EXPECT_EQ(any_of[0]["required"], json::array({"name", "parameters"}));
  EXPECT_FALSE(any_of[1]["properties"]["parameters"].contains("$defs"));
  EXPECT_EQ(schema["$defs"]["Item"], json({{"type", "string"}}));
  EXPECT_EQ(any_of[2]["properties"]["parameters"],
            json({{"type", "object"}, {"properties", json::object()}}));

  json b = body({weather_tool(), with_defs}, "required");
  b["parallel_tool_calls"] = false;
  r = parse_tool_request(b);
  EXPECT_EQ(json::parse(tool_constraint(r.value())->spec)["maxItems"], 1);

  // One $defs name, two schemas: a 400.
  json other = with_defs;
  other["function"]["name"] = "lookup2";
  other["function"]["parameters"]["$defs"]["Item"] = {{"type", "integer"}};
  r = parse_tool_request(body({with_defs, other}, "required"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(tool_constraint(r.value()).ok());
}

}  // namespace
}  // namespace vpod::server
