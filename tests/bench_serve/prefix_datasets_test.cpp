// The prefix-caching datasets: a shared system prompt that is shared token
// for token and nothing more, and multi-turn conversations whose every turn
// resends the previous one with its reply.
#include "bench/serve/prefix_datasets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

namespace vpod::bench::serve {
namespace {

std::vector<std::int32_t> iota_pool(int n, std::int32_t first = 100) {
  std::vector<std::int32_t> pool(n);
  std::iota(pool.begin(), pool.end(), first);
  return pool;
}

std::size_t common_prefix(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<std::size_t>(ia - a.begin());
}

bool starts_with(const std::vector<std::int32_t>& whole, const std::vector<std::int32_t>& part) {
  return whole.size() >= part.size() && std::equal(part.begin(), part.end(), whole.begin());
}

TEST(SharedPrefix, EveryPromptIsThePrefixThenItsOwnIdsAndSharesNothingMore) {
  const auto pool = iota_pool(200);
  const SharedPrefixSpec spec{.num_requests = 40, .prefix_len = 300, .unique_len = 24};
  const SharedPrefixPrompts p = make_shared_prefix_prompts(pool, spec, 7);
  ASSERT_EQ(p.prefix.size(), 300u);
  ASSERT_EQ(p.unique.size(), 40u);
  const std::set<std::int32_t> valid(pool.begin(), pool.end());
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < spec.num_requests; ++i) {
    prompts.push_back(p.prompt(i));
    const auto& prompt = prompts.back();
    ASSERT_EQ(prompt.size(), 324u);
    EXPECT_TRUE(starts_with(prompt, p.prefix));
    EXPECT_TRUE(std::equal(p.unique[i].begin(), p.unique[i].end(), prompt.begin() + 300));
    for (const std::int32_t id : prompt) ASSERT_TRUE(valid.count(id)) << id;
  }
  // Any two prompts share exactly the prefix: the cacheable part is P ids.
  for (int i = 0; i < spec.num_requests; ++i) {
    for (int j = i + 1; j < spec.num_requests; ++j) {
      ASSERT_EQ(common_prefix(prompts[i], prompts[j]), 300u) << i << " " << j;
    }
  }
  // The prefix is not one id repeated (it would be a degenerate test of sharing).
  EXPECT_GT(std::set<std::int32_t>(p.prefix.begin(), p.prefix.end()).size(), 50u);
}

TEST(SharedPrefix, SeedsReproduceAndDifferentSeedsDiffer) {
  const auto pool = iota_pool(50);
  const SharedPrefixSpec spec{.num_requests = 8, .prefix_len = 64, .unique_len = 16};
  const auto a = make_shared_prefix_prompts(pool, spec, 3);
  const auto b = make_shared_prefix_prompts(pool, spec, 3);
  const auto c = make_shared_prefix_prompts(pool, spec, 4);
  EXPECT_EQ(a.prefix, b.prefix);
  EXPECT_EQ(a.unique, b.unique);
  EXPECT_NE(a.prefix, c.prefix);
  EXPECT_NE(a.unique, c.unique);
}

TEST(SharedPrefix, PoolSmallerThanTheRequestsStillGivesValidPrompts) {
  const auto pool = iota_pool(3);
  const SharedPrefixSpec spec{.num_requests = 10, .prefix_len = 5, .unique_len = 40};
  const auto p = make_shared_prefix_prompts(pool, spec, 1);
  std::set<std::vector<std::int32_t>> distinct;
  for (int i = 0; i < spec.num_requests; ++i) {
    const auto prompt = p.prompt(i);
    ASSERT_EQ(prompt.size(), 45u);
    EXPECT_TRUE(starts_with(prompt, p.prefix));
    distinct.insert(p.unique[i]);
  }
  EXPECT_EQ(distinct.size(), 10u);  // 3^40 choices: unique parts still differ
}

TEST(SharedPrefix, BadSpecsAreRejected) {
  EXPECT_TRUE(validate(SharedPrefixSpec{}).ok());
  EXPECT_FALSE(validate(SharedPrefixSpec{.num_requests = 0}).ok());
  EXPECT_FALSE(validate(SharedPrefixSpec{.prefix_len = 0}).ok());
  EXPECT_FALSE(validate(SharedPrefixSpec{.unique_len = 0}).ok());
}

TEST(MultiTurn, ScriptsHaveTheAskedLengthsAndReproduce) {
  const auto pool = iota_pool(100);
  const MultiTurnSpec spec{.num_conversations = 3, .num_turns = 4, .turn_len = 50, .output_len = 7};
  const auto scripts = make_conversations(pool, spec, 11);
  ASSERT_EQ(scripts.size(), 3u);
  for (const ConversationScript& s : scripts) {
    ASSERT_EQ(s.user_turns.size(), 4u);
    ASSERT_EQ(s.output_lens.size(), 4u);
    for (const auto& turn : s.user_turns) EXPECT_EQ(turn.size(), 50u);
    for (const int out : s.output_lens) EXPECT_EQ(out, 7);
  }
  EXPECT_NE(scripts[0].user_turns, scripts[1].user_turns);
  EXPECT_NE(scripts[0].user_turns[0], scripts[0].user_turns[1]);
  const auto again = make_conversations(pool, spec, 11);
  const auto other = make_conversations(pool, spec, 12);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(scripts[c].user_turns, again[c].user_turns);
    EXPECT_NE(scripts[c].user_turns, other[c].user_turns);
  }
  // One more conversation leaves the first ones as they were (the extra one
  // is bench serve's test request).
  MultiTurnSpec more = spec;
  more.num_conversations = 4;
  const auto extended = make_conversations(pool, more, 11);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(scripts[c].user_turns, extended[c].user_turns);
}

TEST(MultiTurn, RangeRatioBoundsTheTurnAndReplyLengths) {
  const auto pool = iota_pool(10);
  const MultiTurnSpec spec{.num_conversations = 20,
                           .num_turns = 10,
                           .turn_len = 100,
                           .output_len = 20,
                           .range_ratio = 0.5};
  std::set<int> turn_lens;
  for (const auto& s : make_conversations(pool, spec, 2)) {
    for (std::size_t t = 0; t < s.user_turns.size(); ++t) {
      turn_lens.insert(static_cast<int>(s.user_turns[t].size()));
      EXPECT_GE(s.output_lens[t], 10);
      EXPECT_LE(s.output_lens[t], 30);
    }
  }
  EXPECT_GE(*turn_lens.begin(), 50);
  EXPECT_LE(*turn_lens.rbegin(), 150);
  EXPECT_GT(turn_lens.size(), 20u);
  EXPECT_FALSE(validate(MultiTurnSpec{.num_conversations = 0}).ok());
  EXPECT_FALSE(validate(MultiTurnSpec{.num_turns = 0}).ok());
  EXPECT_FALSE(validate(MultiTurnSpec{.turn_len = 0}).ok());
  EXPECT_FALSE(validate(MultiTurnSpec{.range_ratio = 1.0}).ok());
}

TEST(Conversation, EachTurnResendsThePreviousPromptAndItsReplyThenTheNewUserTurn) {
  const auto pool = iota_pool(30);
  const MultiTurnSpec spec{.num_conversations = 1, .num_turns = 3, .turn_len = 5, .output_len = 2};
  const ConversationScript script = make_conversations(pool, spec, 5)[0];
  Conversation conversation(script);
  EXPECT_EQ(conversation.num_turns(), 3);
  const std::vector<std::vector<std::int32_t>> replies = {{900, 901, 902}, {910}, {920, 921}};
  std::vector<std::int32_t> previous;
  for (int t = 0; t < 3; ++t) {
    ASSERT_FALSE(conversation.finished());
    EXPECT_EQ(conversation.turns_done(), t);
    EXPECT_EQ(conversation.next_output_len(), 2);
    const std::vector<std::int32_t> prompt = conversation.next_prompt_ids();
    // previous prompt + its reply + this turn's user ids, exactly.
    std::vector<std::int32_t> expected = previous;
    if (t > 0) expected.insert(expected.end(), replies[t - 1].begin(), replies[t - 1].end());
    expected.insert(expected.end(), script.user_turns[t].begin(), script.user_turns[t].end());
    EXPECT_EQ(prompt, expected) << "turn " << t;
    EXPECT_TRUE(starts_with(prompt, previous));
    EXPECT_GT(prompt.size(), previous.size());
    previous = prompt;
    conversation.add_reply("reply " + std::to_string(t), replies[t]);
  }
  EXPECT_TRUE(conversation.finished());
  EXPECT_EQ(previous.size(), 5u + 3u + 5u + 1u + 5u);
}

TEST(Conversation, ChatMessagesAlternateAndCarryTheRepliesText) {
  const auto pool = iota_pool(30);
  ConversationScript script =
      make_conversations(pool, {.num_conversations = 1, .num_turns = 3, .turn_len = 4}, 9)[0];
  script.user_texts = {"first question", "second question", "third question"};
  Conversation conversation(script);
  auto m = conversation.next_messages();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[0].content, "first question");
  conversation.add_reply("first answer", {});
  conversation.add_reply("second answer", {});
  m = conversation.next_messages();
  ASSERT_EQ(m.size(), 5u);
  const std::vector<std::pair<std::string, std::string>> expected = {{"user", "first question"},
                                                                     {"assistant", "first answer"},
                                                                     {"user", "second question"},
                                                                     {"assistant", "second answer"},
                                                                     {"user", "third question"}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m[i].role, expected[i].first) << i;
    EXPECT_EQ(m[i].content, expected[i].second) << i;
  }
}

}  // namespace
}  // namespace vpod::bench::serve
