// Datasets that repeat prefixes (prefix_datasets.h): a shared system prompt
// and multi-turn conversations that resend everything said so far.
#include "bench/serve/prefix_datasets.h"

#include <algorithm>

#include <fmt/format.h>

#include "bench/serve/dataset.h"
#include "common/check.h"

namespace vpod::bench::serve {

Status validate(const SharedPrefixSpec& spec) {
  if (spec.num_requests < 1) return invalid_argument("the number of requests must be >= 1");
  if (spec.prefix_len < 1) return invalid_argument("the shared prefix length must be >= 1");
  if (spec.unique_len < 1) {
    return invalid_argument("the unique length must be >= 1 (prompts would be identical)");
  }
  return {};
}

std::vector<std::int32_t> SharedPrefixPrompts::prompt(int i) const {
  std::vector<std::int32_t> ids = prefix;
  ids.insert(ids.end(), unique[i].begin(), unique[i].end());
  return ids;
}

SharedPrefixPrompts make_shared_prefix_prompts(std::span<const std::int32_t> pool,
                                               const SharedPrefixSpec& spec, std::uint64_t seed) {
  VPOD_CHECK(validate(spec).ok());
  VPOD_CHECK(!pool.empty());
  std::mt19937_64 rng(seed);
  SharedPrefixPrompts out;
  out.prefix = make_prompt_ids(pool, spec.prefix_len, rng);
  // First ids of the unique parts: without replacement when the pool allows,
  // so no two prompts share more than the prefix.
  std::vector<std::int32_t> firsts(pool.begin(), pool.end());
  std::shuffle(firsts.begin(), firsts.end(), rng);
  const bool distinct = firsts.size() >= static_cast<std::size_t>(spec.num_requests);
  out.unique.resize(spec.num_requests);
  for (int i = 0; i < spec.num_requests; ++i) {
    std::vector<std::int32_t>& ids = out.unique[i];
    ids = make_prompt_ids(pool, spec.unique_len, rng);
    if (distinct) ids[0] = firsts[i];
  }
  return out;
}

Status validate(const MultiTurnSpec& spec) {
  if (spec.num_conversations < 1)
    return invalid_argument("the number of conversations must be >= 1");
  if (spec.num_turns < 1) return invalid_argument("the number of turns must be >= 1");
  return validate(RandomLengths{
      .input_len = spec.turn_len, .output_len = spec.output_len, .range_ratio = spec.range_ratio});
}

std::vector<ConversationScript> make_conversations(std::span<const std::int32_t> pool,
                                                   const MultiTurnSpec& spec, std::uint64_t seed) {
  VPOD_CHECK(validate(spec).ok());
  const RandomLengths lengths{
      .input_len = spec.turn_len, .output_len = spec.output_len, .range_ratio = spec.range_ratio};
  const std::vector<RequestLengths> turns =
      sample_random_lengths(spec.num_conversations * spec.num_turns, lengths, seed);
  std::mt19937_64 rng(seed ^ 0x6a09e667f3bcc908ULL);  // ids apart from the lengths' stream
  std::vector<ConversationScript> out(spec.num_conversations);
  for (int c = 0; c < spec.num_conversations; ++c) {
    for (int t = 0; t < spec.num_turns; ++t) {
      const RequestLengths& l = turns[static_cast<std::size_t>(c) * spec.num_turns + t];
      out[c].user_turns.push_back(make_prompt_ids(pool, l.input_len, rng));
      out[c].output_lens.push_back(l.output_len);
    }
  }
  return out;
}

int Conversation::next_output_len() const {
  VPOD_CHECK(!finished());
  return script_->output_lens[turns_done()];
}

std::vector<std::int32_t> Conversation::next_prompt_ids() const {
  VPOD_CHECK(!finished());
  std::vector<std::int32_t> ids;
  for (int t = 0; t < turns_done(); ++t) {
    ids.insert(ids.end(), script_->user_turns[t].begin(), script_->user_turns[t].end());
    ids.insert(ids.end(), reply_ids_[t].begin(), reply_ids_[t].end());
  }
  const auto& next = script_->user_turns[turns_done()];
  ids.insert(ids.end(), next.begin(), next.end());
  return ids;
}

std::vector<ChatMessage> Conversation::next_messages() const {
  VPOD_CHECK(!finished());
  VPOD_CHECK_MSG(script_->user_texts.size() == script_->user_turns.size(),
                 "chat needs the user turns' text");
  std::vector<ChatMessage> messages;
  for (int t = 0; t < turns_done(); ++t) {
    messages.push_back({"user", script_->user_texts[t]});
    messages.push_back({"assistant", reply_texts_[t]});
  }
  messages.push_back({"user", script_->user_texts[turns_done()]});
  return messages;
}

void Conversation::add_reply(std::string text, std::vector<std::int32_t> ids) {
  VPOD_CHECK(!finished());
  reply_texts_.push_back(std::move(text));
  reply_ids_.push_back(std::move(ids));
}

}  // namespace vpod::bench::serve
