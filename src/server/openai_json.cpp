// OpenAI response bodies (openai_json.h): completions, chat completions, SSE
// chunks, logprobs, usage and the models list as JSON.
#include "server/openai_json.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "common/utf8.h"

namespace vpod::server {
namespace {

using nlohmann::json;

float reported(float logprob) {
  return std::isnan(logprob) ? kMinReportedLogprob : std::max(logprob, kMinReportedLogprob);
}

json bytes_json(std::string_view bytes) {
  json out = json::array();
  for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::span<const engine::TokenLogprob> top_of(const engine::SampledToken& t) {
  return {t.top.data(),
          static_cast<std::size_t>(std::clamp(t.num_top, 0, engine::kMaxTopLogprobs))};
}

json empty_logprobs(bool chat) {
  if (chat) return {{"content", json::array()}};
  return {{"tokens", json::array()},
          {"token_logprobs", json::array()},
          {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

json finish_reason_json(engine::FinishReason reason) {
  if (reason == engine::FinishReason::none) return nullptr;
  return std::string(engine::finish_reason_name(reason));
}

}  // namespace

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

json models_response(const ModelCard& card) {
  // One entry per served name, the reported one first (as vLLM lists them).
  json data = json::array();
  const auto entry = [&](const std::string& name) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", card.created},
                    {"owned_by", "vpod"},
                    {"root", card.root},
                    {"parent", nullptr},
                    {"max_model_len", card.max_model_len},
                    {"permission", json::array()}});
  };
  entry(card.id);
  for (const std::string& alias : card.aliases) entry(alias);
  return {{"object", "list"}, {"data", std::move(data)}};
}

ResponseBuilder::ResponseBuilder(ResponseOptions options, TokenBytesFn token_bytes,
                                 std::vector<std::vector<std::int32_t>> prompts,
                                 std::vector<std::string> echo_texts)
    : options_(std::move(options)),
      token_bytes_(std::move(token_bytes)),
      prompts_(std::move(prompts)),
      echo_texts_(std::move(echo_texts)) {
  echo_texts_.resize(prompts_.size());
  for (std::size_t p = 0; p < prompts_.size(); ++p) {
    prompt_tokens_ += static_cast<int>(prompts_[p].size());
    for (int i = 0; i < options_.n; ++i) {
      Choice choice;
      choice.prompt_index = static_cast<int>(p);
      choice.text_offset = utf8::count_chars(echo_texts_[p]);
      if (options_.endpoint == Endpoint::chat && options_.stream && options_.chat_output.active()) {
        choice.parser = std::make_unique<chat_output::ChatOutputParser>(options_.chat_output);
      }
      choices_.push_back(std::move(choice));
    }
  }
}

int ResponseBuilder::completion_tokens() const {
  int total = 0;
  for (const Choice& c : choices_) total += c.num_generated;
  return total;
}

// A prompt's n choices are n engine requests, each with its own prefix-cache
// hit; the prompt is counted once, so is its first choice's hit.
int ResponseBuilder::cached_tokens() const {
  int total = 0;
  for (std::size_t p = 0; p < prompts_.size(); ++p)
    total += choices_[p * static_cast<std::size_t>(options_.n)].num_cached;
  return total;
}

json ResponseBuilder::usage() const {
  const int completion = completion_tokens();
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion},
          {"total_tokens", prompt_tokens_ + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens()}}}};
}

json ResponseBuilder::choice_usage(const Choice& choice) const {
  const int prompt = static_cast<int>(prompts_[choice.prompt_index].size());
  return {{"prompt_tokens", prompt},
          {"completion_tokens", choice.num_generated},
          {"total_tokens", prompt + choice.num_generated}};
}

json ResponseBuilder::chunk_header() const {
  const bool chat = options_.endpoint == Endpoint::chat;
  return {{"id", options_.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", options_.created},
          {"model", options_.model}};
}

// Completions: {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}.
// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json ResponseBuilder::stop_reason_json(const engine::RequestOutput& delta) const {
  if (!delta.stop_string.empty()) return delta.stop_string;
  const auto& ids = options_.stop_token_ids;
  if (delta.stop_token && std::find(ids.begin(), ids.end(), *delta.stop_token) != ids.end()) {
    return *delta.stop_token;
  }
  return nullptr;
}

json ResponseBuilder::logprobs_json(Choice& choice,
                                    const std::vector<engine::SampledToken>& logprobs) {
  if (options_.endpoint == Endpoint::chat) {
    json content = json::array();
    for (const engine::SampledToken& l : logprobs) {
      const std::string bytes = token_bytes_(l.token);
      json top = json::array();
      for (const engine::TokenLogprob& t : top_of(l)) {
        const std::string t_bytes = token_bytes_(t.token);
        top.push_back({{"token", utf8::lossy(t_bytes)},
                       {"logprob", reported(t.logprob)},
                       {"bytes", bytes_json(t_bytes)}});
      }
      content.push_back({{"token", utf8::lossy(bytes)},
                         {"logprob", reported(l.logprob)},
                         {"bytes", bytes_json(bytes)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const engine::SampledToken& l : logprobs) {
    const std::string text = utf8::lossy(token_bytes_(l.token));
    tokens.push_back(text);
    token_logprobs.push_back(reported(l.logprob));
    // A dict keyed by token text (as OpenAI and vLLM); the sampled token is
    // always in it. The first (most likely) of equal texts wins.
    json top = json::object();
    for (const engine::TokenLogprob& t : top_of(l)) {
      const std::string key = utf8::lossy(token_bytes_(t.token));
      if (!top.contains(key)) top[key] = reported(t.logprob);
    }
    if (l.num_top > 0 && !top.contains(text)) top[text] = reported(l.logprob);
    top_logprobs.push_back(l.num_top > 0 ? std::move(top) : json(nullptr));
    text_offset.push_back(choice.text_offset);
    choice.text_offset += utf8::count_chars(text);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

json ResponseBuilder::delta_logprobs(Choice& choice, const engine::RequestOutput& delta) {
  const std::vector<std::int32_t>& prompt = prompts_[choice.prompt_index];
  if (choice.started || !options_.echo_logprobs ||
      delta.prompt_logprobs.size() + 1 != prompt.size()) {
    return logprobs_json(choice, delta.logprobs);
  }
  // The prompt's tokens lead, from offset 0 of the echoed text; the first has
  // no logprob (nothing precedes it). Top-N as asked for the output.
  const int top = options_.logprobs_top;
  std::vector<engine::SampledToken> tokens;
  tokens.reserve(prompt.size());
  tokens.push_back({.token = prompt.front()});
  for (engine::SampledToken t : delta.prompt_logprobs) {
    t.num_top = std::min(t.num_top, top);
    tokens.push_back(t);
  }
  choice.text_offset = 0;
  json out = logprobs_json(choice, tokens);
  out["token_logprobs"][0] = nullptr;
  out["top_logprobs"][0] = nullptr;
  append_logprobs(out, logprobs_json(choice, delta.logprobs));
  return out;
}

json ResponseBuilder::prompt_logprobs_json(const Choice& choice,
                                           const std::vector<engine::SampledToken>& scored) const {
  const std::vector<std::int32_t>& prompt = prompts_[choice.prompt_index];
  json out = json::array();
  if (scored.size() + 1 != prompt.size()) return out;  // ended before its prompt was computed
  out.push_back(nullptr);
  const int top = options_.prompt_logprobs.value_or(0);
  auto entry = [&](float logprob, int rank, std::int32_t token) {
    return json{{"logprob", reported(logprob)},
                {"rank", rank},
                {"decoded_token", utf8::lossy(token_bytes_(token))}};
  };
  for (const engine::SampledToken& t : scored) {
    // The prompt token first, then the top N (ranks 1..N) it is not among.
    json position = json::object();
    position[std::to_string(t.token)] = entry(t.logprob, t.rank, t.token);
    const std::span<const engine::TokenLogprob> tops = top_of(t);
    for (std::size_t k = 0; k < tops.size() && static_cast<int>(k) < top; ++k) {
      const std::string key = std::to_string(tops[k].token);
      if (!position.contains(key)) {
        position[key] = entry(tops[k].logprob, static_cast<int>(k) + 1, tops[k].token);
      }
    }
    out.push_back(std::move(position));
  }
  return out;
}

// Appends the arrays of `more` to those of `into` (same shape).
void ResponseBuilder::append_logprobs(json& into, json&& more) const {
  if (into.is_null()) {
    into = std::move(more);
    return;
  }
  for (auto& [key, values] : more.items()) {
    for (json& v : values) into[key].push_back(std::move(v));
  }
}

std::string ResponseBuilder::add(int index, engine::RequestOutput& delta) {
  VPOD_CHECK(index >= 0 && index < num_choices());
  Choice& choice = choices_[index];
  VPOD_CHECK_MSG(!choice.finished, "a delta after the final one");
  choice.num_generated = delta.num_generated_tokens;
  choice.num_cached = delta.num_cached_tokens;
  if (!choice.started && !echo_texts_[choice.prompt_index].empty()) {
    delta.text.insert(0, echo_texts_[choice.prompt_index]);
  }

  std::string events;
  if (options_.stream) {
    events = stream_content(index, choice, delta);
  } else {
    choice.text += delta.text;
    choice.token_ids.insert(choice.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
    if (options_.prompt_logprobs && !choice.started && choice.prompt_logprobs.is_null()) {
      choice.prompt_logprobs = prompt_logprobs_json(choice, delta.prompt_logprobs);
    }
    if (options_.logprobs) append_logprobs(choice.logprobs, delta_logprobs(choice, delta));
    choice.started = true;
  }

  if (delta.finished) {
    choice.finished = true;
    ++num_finished_;
    choice.finish_reason = delta.finish_reason;
    choice.stop_reason = stop_reason_json(delta);
    if (delta.finish_reason == engine::FinishReason::error) {
      ApiError e = server_error("Generation failed: " + delta.error);
      if (options_.stream) events += sse_event(error_json(e));
      if (!error_) error_ = std::move(e);
    } else if (options_.stream) {
      events += stream_final(index, choice);
    }
  }
  return events;
}

std::string ResponseBuilder::stream_content(int index, Choice& choice,
                                            engine::RequestOutput& delta) {
  if (choice.parser) return stream_parsed(index, choice, delta);
  const bool has_tokens = !delta.token_ids.empty();
  if (delta.text.empty() && !(has_tokens && (options_.logprobs || options_.return_token_ids))) {
    return "";
  }
  json c = {{"index", index}};
  json chunk = chunk_header();
  if (options_.endpoint == Endpoint::chat) {
    json d = json::object();
    if (!choice.started) d["role"] = "assistant";
    d["content"] = delta.text;
    c["delta"] = std::move(d);
    if (!choice.started && options_.return_token_ids) {
      chunk["prompt_token_ids"] = prompts_[choice.prompt_index];
    }
  } else {
    c["text"] = delta.text;
    if (!choice.started && options_.return_token_ids) {
      c["prompt_token_ids"] = prompts_[choice.prompt_index];
    }
  }
  c["logprobs"] = options_.logprobs ? delta_logprobs(choice, delta) : json(nullptr);
  c["finish_reason"] = nullptr;
  if (options_.endpoint == Endpoint::completions) c["stop_reason"] = nullptr;
  if (options_.return_token_ids) c["token_ids"] = delta.token_ids;
  choice.started = true;
  chunk["choices"] = json::array({std::move(c)});
  if (options_.continuous_usage) chunk["usage"] = choice_usage(choice);
  return sse_event(chunk);
}

// Streamed chat whose text is parsed: one chunk per delta object the parser
// gives (content, reasoning_content, a tool call's header or argument text);
// the first carries the role, the logprobs and the token ids of this piece.
std::string ResponseBuilder::stream_parsed(int index, Choice& choice,
                                           engine::RequestOutput& delta) {
  std::vector<json> deltas;
  for (auto& d : choice.parser->feed(delta.text)) deltas.push_back(std::move(d));
  if (delta.finished) {
    for (auto& d : choice.parser->finish()) deltas.push_back(std::move(d));
    choice.tool_calls = choice.parser->reports_tool_calls();
  }
  const bool token_info =
      !delta.token_ids.empty() && (options_.logprobs || options_.return_token_ids);
  if (deltas.empty() && token_info) deltas.push_back(json::object());
  std::string events;
  for (std::size_t k = 0; k < deltas.size(); ++k) {
    json d = json::object();
    if (!choice.started) d["role"] = "assistant";
    d.update(deltas[k]);
    json c = {{"index", index}, {"delta", std::move(d)}};
    c["logprobs"] =
        options_.logprobs && k == 0 ? logprobs_json(choice, delta.logprobs) : json(nullptr);
    c["finish_reason"] = nullptr;
    if (options_.return_token_ids)
      c["token_ids"] = k == 0 ? delta.token_ids : decltype(delta.token_ids)();
    json chunk = chunk_header();
    if (!choice.started && options_.return_token_ids) {
      chunk["prompt_token_ids"] = prompts_[choice.prompt_index];
    }
    choice.started = true;
    chunk["choices"] = json::array({std::move(c)});
    if (options_.continuous_usage) chunk["usage"] = choice_usage(choice);
    events += sse_event(chunk);
  }
  return events;
}

// OpenAI reports "tool_calls" when the model stopped after calling tools.
json ResponseBuilder::finish_json(const Choice& choice) const {
  if (choice.tool_calls && choice.finish_reason == engine::FinishReason::stop) return "tool_calls";
  return finish_reason_json(choice.finish_reason);
}

std::string ResponseBuilder::stream_final(int index, const Choice& choice) const {
  json c = {{"index", index}};
  json chunk = chunk_header();
  if (options_.endpoint == Endpoint::chat) {
    // A choice that produced no text still announces its role.
    c["delta"] = choice.started ? json::object() : json{{"role", "assistant"}, {"content", ""}};
  } else {
    c["text"] = "";
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_json(choice);
  c["stop_reason"] = choice.stop_reason;
  chunk["choices"] = json::array({std::move(c)});
  if (options_.continuous_usage) chunk["usage"] = choice_usage(choice);
  return sse_event(chunk);
}

std::string ResponseBuilder::stream_tail() const {
  std::string tail;
  if (options_.include_usage) {
    json chunk = chunk_header();
    chunk["choices"] = json::array();
    chunk["usage"] = usage();
    tail = sse_event(chunk);
  }
  tail += kSseDone;
  return tail;
}

json ResponseBuilder::response() const {
  VPOD_CHECK(all_finished() && !options_.stream);
  const bool chat = options_.endpoint == Endpoint::chat;
  json choices = json::array();
  for (int i = 0; i < num_choices(); ++i) {
    const Choice& choice = choices_[i];
    json c = {{"index", i}};
    json finish_reason = finish_reason_json(choice.finish_reason);
    if (chat && options_.chat_output.active()) {
      bool tool_calls = false;
      c["message"] = chat_output::parse_chat_message(options_.chat_output, choice.text, tool_calls);
      if (tool_calls && choice.finish_reason == engine::FinishReason::stop) {
        finish_reason = "tool_calls";
      }
    } else if (chat) {
      c["message"] = {{"role", "assistant"}, {"content", choice.text}};
    } else {
      c["text"] = choice.text;
    }
    c["logprobs"] =
        options_.logprobs && choice.logprobs.is_null() ? empty_logprobs(chat) : choice.logprobs;
    c["finish_reason"] = std::move(finish_reason);
    c["stop_reason"] = choice.stop_reason;
    if (options_.return_token_ids) {
      if (!chat) c["prompt_token_ids"] = prompts_[choice.prompt_index];
      c["token_ids"] = choice.token_ids;
    }
    if (options_.prompt_logprobs && !chat) c["prompt_logprobs"] = choice.prompt_logprobs;
    choices.push_back(std::move(c));
  }
  json body = {{"id", options_.id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", options_.created},
               {"model", options_.model},
               {"choices", std::move(choices)},
               {"usage", usage()}};
  if (chat && options_.return_token_ids) body["prompt_token_ids"] = prompts_.front();
  if (chat && options_.prompt_logprobs) body["prompt_logprobs"] = choices_.front().prompt_logprobs;
  return body;
}

}  // namespace vpod::server
