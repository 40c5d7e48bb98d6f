// The Responses API's response object and streamed events (responses_json.h).
#include "server/responses_json.h"

#include "common/check.h"

namespace vpod::server {

using nlohmann::json;

ResponsesBuilder::ResponsesBuilder(ResponsesOptions options) : options_(std::move(options)) {}

const char* ResponsesBuilder::status() const {
  if (!finished_) return "in_progress";
  switch (finish_reason_) {
    case engine::FinishReason::length: return "incomplete";
    case engine::FinishReason::error: return "failed";
    case engine::FinishReason::abort: return "cancelled";
    default: return "completed";
  }
}

json ResponsesBuilder::text_part(bool done) const {
  return {{"type", "output_text"},
          {"text", done ? text_ : std::string()},
          {"annotations", json::array()},
          {"logprobs", json::array()}};
}

// The item is "incomplete" when the length limit cut it, as OpenAI marks it.
json ResponsesBuilder::message_item(bool done) const {
  const char* item_status = !done                                            ? "in_progress"
                            : finish_reason_ == engine::FinishReason::length ? "incomplete"
                                                                             : "completed";
  json item = {{"id", options_.message_id},
               {"type", "message"},
               {"status", item_status},
               {"role", "assistant"},
               {"content", json::array()}};
  if (done) item["content"].push_back(text_part(true));
  return item;
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
  r["output"].push_back(message_item(true));
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

std::string ResponsesBuilder::start_events() {
  started_ = true;
  std::string out = event("response.created", {{"response", response()}});
  out += event("response.in_progress", {{"response", response()}});
  out += event("response.output_item.added", {{"output_index", 0}, {"item", message_item(false)}});
  out += event("response.content_part.added", {{"item_id", options_.message_id},
                                               {"output_index", 0},
                                               {"content_index", 0},
                                               {"part", text_part(false)}});
  return out;
}

std::string ResponsesBuilder::finish_events() {
  const json where = {{"item_id", options_.message_id}, {"output_index", 0}, {"content_index", 0}};
  json text_done = where;
  text_done["text"] = text_;
  text_done["logprobs"] = json::array();
  std::string out = event("response.output_text.done", std::move(text_done));
  json part_done = where;
  part_done["part"] = text_part(true);
  out += event("response.content_part.done", std::move(part_done));
  out += event("response.output_item.done", {{"output_index", 0}, {"item", message_item(true)}});
  const char* last = finish_reason_ == engine::FinishReason::length ? "response.incomplete"
                     : error_                                       ? "response.failed"
                                                                    : "response.completed";
  out += event(last, {{"response", response()}});
  return out;
}

void ResponsesBuilder::keep() {
  if (options_.store == nullptr || error_ || finish_reason_ == engine::FinishReason::abort) return;
  StoredResponse entry;
  entry.id = options_.id;
  entry.response = response();
  entry.conversation = std::move(options_.conversation);
  entry.conversation.push_back({{"role", "assistant"}, {"content", text_}});
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
  text_ += delta.text;
  std::string out;
  if (options_.stream) {
    if (!started_) out = start_events();
    if (!delta.text.empty()) {
      out += event("response.output_text.delta", {{"item_id", options_.message_id},
                                                  {"output_index", 0},
                                                  {"content_index", 0},
                                                  {"delta", delta.text},
                                                  {"logprobs", json::array()}});
    }
  }
  if (!delta.finished) return out;
  finished_ = true;
  finish_reason_ = delta.finish_reason;
  if (delta.finish_reason == engine::FinishReason::error) {
    error_ = server_error("Generation failed: " + delta.error);
  }
  if (options_.stream) out += finish_events();
  keep();
  return out;
}

}  // namespace vpod::server
