// Datasets that repeat prompt prefixes, for measuring prefix caching; both
// are token-id sequences drawn from a pool of the served tokenizer's ids
// (make_prompt_ids), so "shared" means shared token by token:
//
// - shared system prompt: N prompts, each one prefix of P ids common to all
//   followed by U ids of its own;
// - multi-turn chat: C conversations of T turns; turn t sends the whole
//   conversation so far (every earlier user turn and the assistant's actual
//   reply to it) followed by about K new user tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench/serve/openai_stream.h"
#include "common/status.h"

namespace vpod::bench::serve {

struct SharedPrefixSpec {
  int num_requests = 64;
  int prefix_len = 8192;  // P: ids every prompt starts with
  int unique_len = 64;    // U: ids of each prompt's own, after the prefix
};

Status validate(const SharedPrefixSpec& spec);

struct SharedPrefixPrompts {
  std::vector<std::int32_t> prefix;               // [prefix_len]
  std::vector<std::vector<std::int32_t>> unique;  // [num_requests][unique_len]
  std::vector<std::int32_t> prompt(int i) const;  // prefix followed by unique[i]
};

// The unique parts start with pairwise different ids whenever the pool has
// at least num_requests ids, so any two prompts share exactly the P prefix
// ids; with a smaller pool two may share a few more.
SharedPrefixPrompts make_shared_prefix_prompts(std::span<const std::int32_t> pool,
                                               const SharedPrefixSpec& spec, std::uint64_t seed);

struct MultiTurnSpec {
  int num_conversations = 8;  // C
  int num_turns = 10;         // T
  int turn_len = 1024;        // K: new user tokens per turn
  int output_len = 64;        // assistant tokens per turn
  double range_ratio = 0.0;   // K and output_len uniform in [L(1-r), L(1+r)], r in [0, 1)
};

Status validate(const MultiTurnSpec& spec);

// What a conversation's user says and how long each reply is asked to be;
// the replies themselves come from the server as the conversation is played.
struct ConversationScript {
  std::vector<std::vector<std::int32_t>> user_turns;  // [num_turns][about turn_len]
  std::vector<int> output_lens;                       // [num_turns]
  // The user turns as text, for the chat endpoint (filled by the caller,
  // e.g. from the server's /detokenize); empty for completions.
  std::vector<std::string> user_texts;
};

std::vector<ConversationScript> make_conversations(std::span<const std::int32_t> pool,
                                                   const MultiTurnSpec& spec, std::uint64_t seed);

// One conversation as it is played: the next turn's request is everything
// said so far, replies included, then the next user turn. Used by one thread
// at a time (a conversation's turns are sent one after another).
class Conversation {
 public:
  explicit Conversation(const ConversationScript& script) : script_(&script) {}

  int num_turns() const { return static_cast<int>(script_->user_turns.size()); }
  int turns_done() const { return static_cast<int>(reply_texts_.size()); }
  bool finished() const { return turns_done() == num_turns(); }
  int next_output_len() const;

  // Completions: user_0, reply_0, ..., reply_{t-1}, user_t as token ids,
  // every earlier turn's ids a prefix of the next turn's.
  std::vector<std::int32_t> next_prompt_ids() const;
  // Chat: user/assistant messages alternating, ending with user turn t.
  std::vector<ChatMessage> next_messages() const;

  // The reply to the turn just sent: the text the server streamed, and (for
  // completions) that text's token ids as the server tokenizes it.
  void add_reply(std::string text, std::vector<std::int32_t> ids);

 private:
  const ConversationScript* script_;
  std::vector<std::string> reply_texts_;
  std::vector<std::vector<std::int32_t>> reply_ids_;
};

}  // namespace vpod::bench::serve
