// The client side of OpenAI streaming (openai_stream.h): request bodies and
// the parse of each streamed event.
#include "bench/serve/openai_stream.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace vpod::bench::serve {

using nlohmann::json;

std::string stream_request_body(const StreamRequest& request) {
  json body = {
      {"model", request.model},
      {"max_tokens", request.max_tokens},
      {"temperature", request.temperature},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
  };
  if (request.ignore_eos) body["ignore_eos"] = true;
  if (request.endpoint == Endpoint::completions) {
    body["prompt"] = request.prompt_ids;
  } else if (request.messages.empty()) {
    body["messages"] = json::array({{{"role", "user"}, {"content", request.prompt_text}}});
  } else {
    json messages = json::array();
    for (const ChatMessage& m : request.messages) {
      messages.push_back({{"role", m.role}, {"content", m.content}});
    }
    body["messages"] = std::move(messages);
  }
  return body.dump();
}

Result<StreamChunk> parse_stream_chunk(std::string_view data, Endpoint endpoint) {
  StreamChunk chunk;
  std::string_view trimmed = data;
  while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\n')) {
    trimmed.remove_suffix(1);
  }
  if (trimmed == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument(
        fmt::format("stream event is not a JSON object: '{}'", data.substr(0, 200)));
  }
  if (const auto it = j.find("error"); it != j.end() && !it->is_null()) {
    if (it->is_object() && it->contains("message") && (*it)["message"].is_string()) {
      chunk.error = (*it)["message"].get<std::string>();
    } else {
      chunk.error = it->dump();
    }
    return chunk;
  }
  if (const auto it = j.find("choices"); it != j.end() && it->is_array() && !it->empty()) {
    chunk.has_choices = true;
    const json& choice = (*it)[0];
    const json* text = nullptr;
    if (endpoint == Endpoint::completions) {
      if (choice.contains("text")) text = &choice["text"];
    } else if (choice.contains("delta") && choice["delta"].is_object() &&
               choice["delta"].contains("content")) {
      text = &choice["delta"]["content"];
    }
    if (text != nullptr && text->is_string()) chunk.text = text->get<std::string>();
  }
  if (const auto it = j.find("usage"); it != j.end() && it->is_object()) {
    const auto count = [&](const char* key) -> std::optional<int> {
      const auto f = it->find(key);
      if (f == it->end() || !f->is_number_integer()) return std::nullopt;
      return f->get<int>();
    };
    chunk.prompt_tokens = count("prompt_tokens");
    chunk.completion_tokens = count("completion_tokens");
    if (const auto details = it->find("prompt_tokens_details");
        details != it->end() && details->is_object()) {
      const auto cached = details->find("cached_tokens");
      if (cached != details->end() && cached->is_number_integer()) {
        chunk.cached_tokens = cached->get<int>();
      }
    }
  }
  return chunk;
}

}  // namespace vpod::bench::serve
