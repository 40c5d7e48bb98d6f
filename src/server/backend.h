// What the HTTP server needs from the rest of vpod, as one narrow interface:
// the model's card, tokenization and chat templates, and generation as a
// stream of engine deltas that can be aborted. EngineBackend
// (engine_backend.h) implements it over the engine, the model and the
// tokenizer; the server's own tests use a deterministic double, so the HTTP
// layer is tested without a model.
//
// Requests and outputs are the engine's own types (engine::RequestSpec,
// engine::RequestOutput); the server only fans a request out into sequences
// and formats what comes back.
//
// Threading: every method may be called from any HTTP worker thread at once.
// A GenerationStream is used by one thread (its HTTP request's); its `wake`
// callback runs on the engine thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/metrics.h"
#include "engine/output_stream.h"
#include "engine/request.h"
#include "server/tool_request.h"

namespace vpod::server {

// GET /v1/models and the limits validation checks against.
struct ModelCard {
  std::string id;            // the served model name, reported in responses
  std::string root;          // the model folder
  std::int64_t created = 0;  // unix seconds the server started
  int max_model_len = 0;     // prompt + generated tokens per request
  int vocab_size = 0;        // token ids must lie in [0, vocab_size)
  // More names `model` in a request may give (--served-model-name A B: "B").
  std::vector<std::string> aliases;
  int max_logprobs = 20;  // --max-logprobs: most top logprobs a request may ask for
  // What a request that sets no temperature, top_p, top_k, min_p or
  // repetition_penalty gets (--generation-config: the engine's defaults, or
  // the model's generation_config.json over them).
  engine::SamplingParams sampling_defaults;
  // The KV cache's settings, as /metrics reports them in vLLM's
  // vllm:cache_config_info (name, value as Python's str() writes it).
  engine::MetricsInfoLabels cache_config;
  // Tool-call and reasoning parsing (--enable-auto-tool-choice,
  // --tool-call-parser, --reasoning-parser).
  ToolServing tool_serving;

  // Whether `name` (a request's `model`) is one of this model's names.
  bool serves(std::string_view name) const {
    return name == id || std::find(aliases.begin(), aliases.end(), name) != aliases.end();
  }
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // vLLM's chat_template_kwargs (enable_thinking, ...): more template variables.
  nlohmann::ordered_json extra_vars = nlohmann::ordered_json::object();
  // The request's tools, as templates see them (`tools`); null: none.
  nlohmann::ordered_json tools;
};

class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // Moves everything produced since the last call into `out` (replacing its
  // contents); false when nothing new is there. Never blocks.
  virtual bool try_pop(engine::RequestOutput& out) = 0;
  // Cancels the sequence (idempotent). Its resources are freed at the next
  // engine step; the stream then ends with finish_reason abort.
  virtual void abort() = 0;
};

class ServingBackend {
 public:
  virtual ~ServingBackend() = default;

  virtual const ModelCard& model() const = 0;
  // False while the model is still loading.
  virtual bool ready() const = 0;

  virtual Result<std::vector<std::int32_t>> tokenize(std::string_view text,
                                                     bool add_special_tokens) const = 0;
  virtual Result<std::string> detokenize(std::span<const std::int32_t> token_ids,
                                         bool skip_special_tokens) const = 0;
  // One token's text as logprobs report it: the token decoded alone (a piece
  // of a multi-byte character may come out as U+FFFD, or as its raw bytes;
  // the server makes it valid UTF-8 and reports these bytes as `bytes`).
  virtual std::string token_bytes(std::int32_t token) const = 0;
  // Renders the model's chat template over validated OpenAI messages
  // ({"role", "content": string or text parts, "name"?}); an error when the
  // model has none or the template rejects the conversation.
  virtual Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages,
                                                  const ChatTemplateOptions& options) const = 0;

  // Queues one sequence. `wake` runs on the engine thread whenever the stream
  // has something new; it must be quick and must not call into the backend.
  virtual Result<std::unique_ptr<GenerationStream>> submit(engine::RequestSpec spec,
                                                           std::function<void()> wake) = 0;

  // The engine's metrics (running/waiting requests, KV usage, token and
  // preemption counters, latency histograms) for /metrics.
  virtual engine::MetricsSnapshot metrics() const = 0;
};

}  // namespace vpod::server
