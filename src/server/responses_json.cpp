// The Responses API's response object and streamed events (responses_json.h).
#include "server/responses_json.h"

#include <fmt/format.h>

#include <random>
#include <thread>

#include "common/check.h"
#include "common/json_nesting.h"
#include "server/request_parse.h"

namespace vpod::server {
namespace {

using nlohmann::json;

// prefix + 32 hex digits ("fc_...", "call_...", "msg_...").
std::string fresh_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

ResponsesBuilder::OutputItem message_item(std::string id, std::string text) {
  ResponsesBuilder::OutputItem item;
  item.id = std::move(id);
  item.text = std::move(text);
  return item;
}

json text_part(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", json::array()},
          {"logprobs", json::array()}};
}

// A call's arguments for the chat template: their JSON value, as the chat
// path gives the template (request_parse.cpp); text that is not JSON (a
// streamed call the length limit cut) stays a string.
nlohmann::ordered_json template_arguments(const std::string& text) {
  if (!json_nesting_within(text, RequestLimits{}.max_json_depth)) return text;
  auto value = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? nlohmann::ordered_json(text) : value;
}

}  // namespace

ResponsesBuilder::ResponsesBuilder(ResponsesOptions options) : options_(std::move(options)) {
  if (options_.tool_output.tools != chat_output::ToolMode::none) {
    // Reasoning is not split out on this endpoint (the handler turns it off).
    VPOD_CHECK(options_.tool_output.reasoning == chat_output::ReasoningParserKind::none);
    parser_ = std::make_unique<chat_output::ChatOutputParser>(options_.tool_output);
  }
}

const char* ResponsesBuilder::status() const {
  if (!finished_) return "in_progress";
  switch (finish_reason_) {
    case engine::FinishReason::length: return "incomplete";
    case engine::FinishReason::error: return "failed";
    case engine::FinishReason::abort: return "cancelled";
    default: return "completed";
  }
}

json ResponsesBuilder::item_json(std::size_t index, bool done) const {
  const OutputItem& item = items_[index];
  // The last item is "incomplete" when the length limit cut it, as OpenAI
  // marks it.
  const bool cut = finish_reason_ == engine::FinishReason::length && index + 1 == items_.size();
  const char* item_status = !done ? "in_progress" : cut ? "incomplete" : "completed";
  if (item.is_call) {
    return {{"id", item.id},           {"type", "function_call"},
            {"status", item_status},   {"arguments", done ? item.text : std::string()},
            {"call_id", item.call_id}, {"name", item.name}};
  }
  json message = {{"id", item.id},
                  {"type", "message"},
                  {"status", item_status},
                  {"role", "assistant"},
                  {"content", json::array()}};
  if (done) message["content"].push_back(text_part(item.text));
  return message;
}

json ResponsesBuilder::usage() const {
  return {{"input_tokens", options_.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", num_cached_}}},
          {"output_tokens", num_generated_},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", options_.prompt_tokens + num_generated_}};
}

json ResponsesBuilder::response() const {
  json r = {{"id", options_.id},
            {"object", "response"},
            {"created_at", options_.created_at},
            {"status", status()},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", options_.model},
            {"output", json::array()},
            {"parallel_tool_calls", true},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"text", {{"format", {{"type", "text"}}}}},
            {"tool_choice", "auto"},
            {"tools", json::array()},
            {"truncation", "disabled"},
            {"usage", nullptr}};
  for (const auto& [key, value] : options_.echoed.items()) r[key] = value;
  if (!finished_) return r;
  for (std::size_t i = 0; i < items_.size(); ++i) r["output"].push_back(item_json(i, true));
  r["usage"] = usage();
  if (finish_reason_ == engine::FinishReason::length) {
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  } else if (error_) {
    r["error"] = {{"code", "server_error"}, {"message", error_->message}};
  }
  return r;
}

std::string ResponsesBuilder::event(const char* type, json data) {
  data["type"] = type;
  data["sequence_number"] = sequence_number_++;
  return std::string("event: ") + type + "\n" + sse_event(data);
}

void ResponsesBuilder::open_item(OutputItem item, std::string& out) {
  items_.push_back(std::move(item));
  if (!options_.stream) return;
  const std::size_t index = items_.size() - 1;
  out += event("response.output_item.added",
               {{"output_index", index}, {"item", item_json(index, false)}});
  if (!items_.back().is_call) {
    out += event("response.content_part.added", {{"item_id", items_.back().id},
                                                 {"output_index", index},
                                                 {"content_index", 0},
                                                 {"part", text_part("")}});
  }
}

void ResponsesBuilder::add_text(const std::string& text, std::string& out) {
  if (items_.empty() || items_.back().is_call) {
    bool first = true;
    for (const OutputItem& item : items_) first = first && item.is_call;
    open_item(message_item(first ? options_.message_id : fresh_id("msg_"), ""), out);
  }
  items_.back().text += text;
  if (!options_.stream) return;
  out += event("response.output_text.delta", {{"item_id", items_.back().id},
                                              {"output_index", items_.size() - 1},
                                              {"content_index", 0},
                                              {"delta", text},
                                              {"logprobs", json::array()}});
}

void ResponsesBuilder::add_parsed(const std::vector<json>& deltas, std::string& out) {
  for (const json& d : deltas) {
    VPOD_CHECK_MSG(!d.contains("reasoning_content"), "no reasoning parser on /v1/responses");
    if (auto content = d.find("content"); content != d.end()) {
      add_text(content->get<std::string>(), out);
      continue;
    }
    for (const json& call : d.at("tool_calls")) {
      const json& function = call.at("function");
      if (call.contains("id")) {
        // A new call: its name now, its arguments as they come. Mistral's
        // template checks its own 9-character ids, so they are kept.
        const bool own_id = options_.tool_output.parser == chat_output::ToolParserKind::mistral;
        call_items_.push_back(items_.size());
        open_item({.is_call = true,
                   .id = fresh_id("fc_"),
                   .text = {},
                   .call_id = own_id ? call.at("id").get<std::string>() : fresh_id("call_"),
                   .name = function.at("name").get<std::string>()},
                  out);
      }
      const std::string arguments = function.value("arguments", "");
      if (arguments.empty()) continue;
      const std::size_t index = call_items_.at(call.at("index").get<std::size_t>());
      items_[index].text += arguments;
      if (!options_.stream) continue;
      out += event("response.function_call_arguments.delta",
                   {{"item_id", items_[index].id}, {"output_index", index}, {"delta", arguments}});
    }
  }
}

std::string ResponsesBuilder::finish_events() {
  std::string out;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    const OutputItem& item = items_[i];
    if (item.is_call) {
      out += event("response.function_call_arguments.done",
                   {{"item_id", item.id}, {"output_index", i}, {"arguments", item.text}});
    } else {
      const json where = {{"item_id", item.id}, {"output_index", i}, {"content_index", 0}};
      json text_done = where;
      text_done["text"] = item.text;
      text_done["logprobs"] = json::array();
      out += event("response.output_text.done", std::move(text_done));
      json part_done = where;
      part_done["part"] = text_part(item.text);
      out += event("response.content_part.done", std::move(part_done));
    }
    out += event("response.output_item.done", {{"output_index", i}, {"item", item_json(i, true)}});
  }
  const char* last = finish_reason_ == engine::FinishReason::length ? "response.incomplete"
                     : error_                                       ? "response.failed"
                                                                    : "response.completed";
  out += event(last, {{"response", response()}});
  return out;
}

// The output as chat messages: text is an assistant message, calls join the
// assistant message just before them (one turn) or start one.
void ResponsesBuilder::keep() {
  if (options_.store == nullptr || error_ || finish_reason_ == engine::FinishReason::abort) return;
  StoredResponse entry;
  entry.id = options_.id;
  entry.response = response();
  entry.conversation = std::move(options_.conversation);
  bool open_turn = false;  // the last message is this output's assistant message
  for (const OutputItem& item : items_) {
    if (!item.is_call) {
      entry.conversation.push_back({{"role", "assistant"}, {"content", item.text}});
      open_turn = true;
      continue;
    }
    if (!open_turn) {
      entry.conversation.push_back({{"role", "assistant"}, {"content", ""}});
      open_turn = true;
    }
    entry.conversation.back()["tool_calls"].push_back(
        {{"id", item.call_id},
         {"type", "function"},
         {"function", {{"name", item.name}, {"arguments", template_arguments(item.text)}}}});
  }
  entry.bytes =
      dump_json(entry.response).size() +
      entry.conversation.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
          .size();
  options_.store->put(std::move(entry));
}

std::string ResponsesBuilder::add(int choice, engine::RequestOutput& delta) {
  VPOD_CHECK_MSG(choice == 0, "a Responses request has one sequence");
  VPOD_CHECK_MSG(!finished_, "a delta after the final one");
  num_generated_ = delta.num_generated_tokens;
  num_cached_ = delta.num_cached_tokens;
  std::string out;
  if (options_.stream && !started_) {
    started_ = true;
    out += event("response.created", {{"response", response()}});
    out += event("response.in_progress", {{"response", response()}});
  }
  if (parser_) {
    add_parsed(parser_->feed(delta.text), out);
    if (delta.finished) add_parsed(parser_->finish(), out);
  } else if (!delta.text.empty()) {
    add_text(delta.text, out);
  }
  if (!delta.finished) return out;
  finished_ = true;
  finish_reason_ = delta.finish_reason;
  if (delta.finish_reason == engine::FinishReason::error) {
    error_ = server_error("Generation failed: " + delta.error);
  }
  // Broken calls: the whole answer is the message, as chat answers (a
  // stream cannot take back what went out).
  if (!options_.stream && parser_ && parser_->malformed()) {
    items_.clear();
    call_items_.clear();
    items_.push_back(message_item(options_.message_id, parser_->answer()));
  }
  // No text and no call: one empty message, as OpenAI answers.
  if (items_.empty()) open_item(message_item(options_.message_id, ""), out);
  if (options_.stream) out += finish_events();
  keep();
  return out;
}

}  // namespace vpod::server
