// The Responses API's output (POST /v1/responses): the response object, and
// when streamed the server-sent events OpenAI emits, each
// "event: <type>\ndata: {..., "sequence_number": k}\n\n":
//   response.created, response.in_progress, then per output item as it
//   appears response.output_item.added and its pieces:
//     message:       response.content_part.added, response.output_text.delta...
//     function_call: response.function_call_arguments.delta...
//   and once the text has ended, per item in order its closing events:
//     message:       response.output_text.done, response.content_part.done
//     function_call: response.function_call_arguments.done
//   each followed by response.output_item.done; then response.completed (or
//   response.incomplete when max_output_tokens ran out, response.failed on an
//   engine error), each of the last carrying the whole response.
//
// Output items, in the order they appear: without tools one message item
// with one output_text part. With tools the text goes through the chat
// path's tool-call parser (chat_output.h): text outside calls is a message
// item, each call a function_call item {id: "fc_...", call_id: "call_...",
// name, arguments}. Items stay open until the text ends (a parser may still
// add to a call after text that follows it). A finished response is put in
// the ResponseStore when the request asked to store it, its conversation
// ending with its output as chat messages (assistant content / tool_calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_output/chat_output.h"
#include "server/openai_json.h"
#include "server/response_store.h"

namespace vpod::server {

struct ResponsesOptions {
  std::string id;          // "resp_..."
  std::string message_id;  // "msg_...": the first message item's
  std::int64_t created_at = 0;
  std::string model;
  bool stream = false;
  int prompt_tokens = 0;
  // The request's parameters the response echoes: instructions,
  // max_output_tokens, temperature, top_p, previous_response_id, store,
  // metadata, user, tools, tool_choice, ... (merged into every response
  // object).
  nlohmann::json echoed = nlohmann::json::object();
  // Kept with the response for previous_response_id: earlier turns and this
  // input as chat messages (the output is appended when it is finished).
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  ResponseStore* store = nullptr;  // null: store is false
  // Tool calls parsed out of the text (tools != ToolMode::none) or none:
  // all of it is one message.
  chat_output::ChatOutputConfig tool_output;
};

class ResponsesBuilder final : public OutputBuilder {
 public:
  // One output item, as far as it has come.
  struct OutputItem {
    bool is_call = false;
    std::string id;       // "msg_..." / "fc_..."
    std::string text;     // the message's output_text, or the call's arguments
    std::string call_id;  // a call's
    std::string name;     // a call's function
  };

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
  nlohmann::json item_json(std::size_t index, bool done) const;
  nlohmann::json usage() const;
  std::string event(const char* type, nlohmann::json data);
  // Output text: to the last item if it is a message, else to a new one.
  void add_text(const std::string& text, std::string& out);
  void open_item(OutputItem item, std::string& out);
  // The parser's delta objects ({"content"} / {"tool_calls": [...]}).
  void add_parsed(const std::vector<nlohmann::json>& deltas, std::string& out);
  std::string finish_events();
  void keep();

  ResponsesOptions options_;
  std::unique_ptr<chat_output::ChatOutputParser> parser_;  // with tools
  std::vector<OutputItem> items_;
  std::vector<std::size_t> call_items_;  // parser call index -> items_ index
  bool started_ = false;                 // the opening events went out
  bool finished_ = false;
  engine::FinishReason finish_reason_ = engine::FinishReason::none;
  int num_generated_ = 0;
  int num_cached_ = 0;
  int sequence_number_ = 0;
  std::optional<ApiError> error_;
};

}  // namespace vpod::server
