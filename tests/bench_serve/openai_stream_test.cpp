#include "bench/serve/openai_stream.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace vpod::bench::serve {
namespace {

TEST(StreamRequestBody, CompletionsSendsTokenIdsAndAsksForUsage) {
  const std::vector<std::int32_t> ids = {5, 17, 9};
  StreamRequest r;
  r.model = "m";
  r.prompt_ids = ids;
  r.max_tokens = 64;
  const auto body = nlohmann::json::parse(stream_request_body(r));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], nlohmann::json({5, 17, 9}));
  EXPECT_EQ(body["max_tokens"], 64);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_FALSE(body.contains("messages"));
}

TEST(StreamRequestBody, ChatSendsOneUserMessage) {
  StreamRequest r;
  r.endpoint = Endpoint::chat;
  r.model = "m";
  r.prompt_text = "hello";
  r.ignore_eos = false;
  const auto body = nlohmann::json::parse(stream_request_body(r));
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], "hello");
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_FALSE(body.contains("ignore_eos"));
}

TEST(StreamRequestBody, ChatSendsAWholeConversation) {
  const std::vector<ChatMessage> messages = {
      {"system", "be brief"}, {"user", "q1"}, {"assistant", "a1"}, {"user", "q2"}};
  StreamRequest r;
  r.endpoint = Endpoint::chat;
  r.model = "m";
  r.prompt_text = "ignored when messages are given";
  r.messages = messages;
  const auto body = nlohmann::json::parse(stream_request_body(r));
  ASSERT_EQ(body["messages"].size(), 4u);
  EXPECT_EQ(body["messages"][0], nlohmann::json({{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(body["messages"][2], nlohmann::json({{"role", "assistant"}, {"content", "a1"}}));
  EXPECT_EQ(body["messages"][3], nlohmann::json({{"role", "user"}, {"content", "q2"}}));
}

TEST(ParseStreamChunk, UsageCachedTokensFromPromptTokensDetails) {
  const auto c =
      parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":8256,"completion_tokens":16,)"
                         R"("prompt_tokens_details":{"cached_tokens":8192}}})",
                         Endpoint::completions);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cached_tokens, 8192);
  const auto none =
      parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,)"
                         R"("prompt_tokens_details":null}})",
                         Endpoint::completions);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->cached_tokens.has_value());
}

TEST(ParseStreamChunk, CompletionChunkWithText) {
  const auto c = parse_stream_chunk(
      R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m",)"
      R"("choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":null}],"usage":null})",
      Endpoint::completions);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->has_choices);
  EXPECT_EQ(c->text, " world");
  EXPECT_FALSE(c->completion_tokens.has_value());
  EXPECT_FALSE(c->done);
}

TEST(ParseStreamChunk, EmptyTextStillCountsAsAChunkWithChoices) {
  // A special token detokenizes to nothing; vLLM still times the chunk.
  const auto c =
      parse_stream_chunk(R"({"choices":[{"index":0,"text":""}]})", Endpoint::completions);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->has_choices);
  EXPECT_EQ(c->text, "");
}

TEST(ParseStreamChunk, FinalUsageChunkHasNoChoices) {
  const auto c = parse_stream_chunk(
      R"({"id":"x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})",
      Endpoint::completions);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_choices);
  EXPECT_EQ(c->prompt_tokens, 12);
  EXPECT_EQ(c->completion_tokens, 34);
}

TEST(ParseStreamChunk, ChatDeltaContentAndRoleOnlyChunk) {
  const auto c =
      parse_stream_chunk(R"({"choices":[{"index":0,"delta":{"content":"hi"}}]})", Endpoint::chat);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->has_choices);
  EXPECT_EQ(c->text, "hi");
  const auto role = parse_stream_chunk(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]})", Endpoint::chat);
  ASSERT_TRUE(role.ok());
  EXPECT_TRUE(role->has_choices);
  EXPECT_EQ(role->text, "");
}

TEST(ParseStreamChunk, DoneErrorAndGarbage) {
  const auto done = parse_stream_chunk("[DONE]", Endpoint::completions);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->done);
  const auto error = parse_stream_chunk(
      R"({"error":{"message":"out of KV cache","type":"server_error","code":500}})",
      Endpoint::completions);
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->error, "out of KV cache");
  EXPECT_FALSE(parse_stream_chunk("{\"choices\":[", Endpoint::completions).ok());
  EXPECT_FALSE(parse_stream_chunk("[1, 2]", Endpoint::completions).ok());
}

}  // namespace
}  // namespace vpod::bench::serve
