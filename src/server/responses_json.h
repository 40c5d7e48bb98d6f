// The Responses API's output (POST /v1/responses): the response object, and
// when streamed the server-sent events OpenAI emits, each
// "event: <type>\ndata: {..., "sequence_number": k}\n\n":
//   response.created, response.in_progress, response.output_item.added,
//   response.content_part.added, response.output_text.delta (per delta),
//   response.output_text.done, response.content_part.done,
//   response.output_item.done, then response.completed (or
//   response.incomplete when max_output_tokens ran out, response.failed on an
//   engine error), each of the last carrying the whole response.
// One message output item with one output_text part. A finished response is
// put in the ResponseStore when the request asked to store it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_json.h"
#include "server/response_store.h"

namespace vpod::server {

struct ResponsesOptions {
  std::string id;          // "resp_..."
  std::string message_id;  // "msg_..."
  std::int64_t created_at = 0;
  std::string model;
  bool stream = false;
  int prompt_tokens = 0;
  // The request's parameters the response echoes: instructions,
  // max_output_tokens, temperature, top_p, previous_response_id, store,
  // metadata, user, ... (merged into every response object).
  nlohmann::json echoed = nlohmann::json::object();
  // Kept with the response for previous_response_id: earlier turns and this
  // input as chat messages (the output is appended when it is finished).
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  ResponseStore* store = nullptr;  // null: store is false
};

class ResponsesBuilder final : public OutputBuilder {
 public:
  explicit ResponsesBuilder(ResponsesOptions options);

  std::string add(int choice, engine::RequestOutput& delta) override;
  bool all_finished() const override { return finished_; }
  std::string stream_tail() const override { return ""; }  // the last event went out in add()
  nlohmann::json response() const override;
  const std::optional<ApiError>& error() const override { return error_; }
  int prompt_tokens() const override { return options_.prompt_tokens; }
  int completion_tokens() const override { return num_generated_; }

 private:
  // "queued" .. "completed" / "incomplete" / "failed" / "cancelled".
  const char* status() const;
  nlohmann::json message_item(bool done) const;
  nlohmann::json text_part(bool done) const;
  nlohmann::json usage() const;
  std::string event(const char* type, nlohmann::json data);
  std::string start_events();
  std::string finish_events();
  void keep();

  ResponsesOptions options_;
  std::string text_;
  bool started_ = false;  // the opening events went out
  bool finished_ = false;
  engine::FinishReason finish_reason_ = engine::FinishReason::none;
  int num_generated_ = 0;
  int num_cached_ = 0;
  int sequence_number_ = 0;
  std::optional<ApiError> error_;
};

}  // namespace vpod::server
