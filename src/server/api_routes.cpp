// The OpenAI-compatible API (api_routes.h): routing, auth and admission from
// the head, and the handlers that answer each route.
#include "server/api_routes.h"

#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/utf8.h"
#include "server/request_parse.h"
#include "server/responses_json.h"
#include "server/responses_request.h"
#include "vpod/build_info.h"

namespace vpod::server {
namespace {

using nlohmann::json;

// prefix + 32 hex digits, unique per process run.
std::string request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

Reply json_reply(int status, const json& body) {
  return {status, "application/json", dump_json(body), {}};
}

// Compares without an early exit, so the key cannot be guessed byte by byte
// from response times.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

RequestLimits limits_for(const ModelCard& card) {
  RequestLimits limits;
  limits.max_model_len = card.max_model_len;
  limits.vocab_size = card.vocab_size;
  limits.max_logprobs = card.max_logprobs;
  limits.sampling_defaults = card.sampling_defaults;
  return limits;
}

// The prompt and what may be generated must fit in --max-model-len.
std::optional<ApiError> check_context(std::size_t prompt_tokens, int max_tokens, int max_model_len,
                                      const char* what, const char* max_param = "max_tokens") {
  if (prompt_tokens + static_cast<std::size_t>(max_tokens) <=
      static_cast<std::size_t>(max_model_len)) {
    return std::nullopt;
  }
  return bad_request(
      fmt::format("This model's maximum context length is {} tokens. However, you "
                  "requested {} tokens ({} in the {}, {} in the completion). "
                  "Please reduce the length of the {} or completion.",
                  max_model_len, prompt_tokens + max_tokens, prompt_tokens, what, max_tokens, what),
      max_param);
}

RouteOutcome error_outcome(const ApiError& error) { return {error_reply(error), {}}; }

// A fresh response id and the request's output options.
ResponseOptions response_options(Endpoint endpoint, const OutputOptions& output) {
  ResponseOptions options;
  options.endpoint = endpoint;
  options.id = request_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-");
  options.n = output.n;
  options.stream = output.stream;
  options.include_usage = output.include_usage;
  options.continuous_usage = output.continuous_usage;
  options.return_token_ids = output.return_token_ids;
  options.prompt_logprobs = output.prompt_logprobs;
  return options;
}

// Fans the prompts out into n sequences each, submits them, and pairs the
// call with the builder that turns its deltas into OpenAI JSON.
RouteOutcome start_generation(ServingBackend& backend, ResponseOptions options,
                              const engine::SamplingParams& sampling,
                              const engine::StopParams& stop, const std::string& cache_salt,
                              const grammar::Constraint& constraint,
                              std::vector<std::vector<std::int32_t>> prompts,
                              std::vector<std::string> echo_texts, std::function<void()> notify) {
  std::vector<engine::RequestSpec> specs;
  specs.reserve(prompts.size() * options.n);
  for (const auto& prompt : prompts) {
    for (int i = 0; i < options.n; ++i) {
      engine::RequestSpec spec{prompt, sampling, stop, cache_salt, constraint};
      if (sampling.seed) spec.sampling.seed = choice_seed(*sampling.seed, i);
      specs.push_back(std::move(spec));
    }
  }
  auto call = GenerationCall::start(backend, std::move(specs), std::move(notify));
  if (!call.ok()) return error_outcome(call.error());

  options.created = static_cast<std::int64_t>(std::time(nullptr));
  options.model = backend.model().id;
  options.logprobs = sampling.logprobs.has_value();
  options.stop_token_ids = stop.stop_token_ids;
  const bool stream = options.stream;
  std::string id = options.id;
  Generation g;
  g.call = std::move(call).value();
  g.builder = std::make_unique<ResponseBuilder>(
      std::move(options), [&backend](std::int32_t t) { return backend.token_bytes(t); },
      std::move(prompts), std::move(echo_texts));
  g.stream = stream;
  return {std::move(g), std::move(id)};
}

// A chat request's prompt: its messages rendered through the chat template
// and tokenized, with stop.max_tokens set (unset max_tokens: whatever the
// context has room for) and checked against the context. `max_param`: the
// request's name for max_tokens.
ApiResult<std::vector<std::int32_t>> chat_prompt(ServingBackend& backend, ChatRequest& r,
                                                 const char* max_param = "max_tokens") {
  const ModelCard& card = backend.model();
  auto text = backend.apply_chat_template(r.messages, r.chat_template);
  if (!text.ok()) return from_status(text.status(), "messages");
  auto tokens = backend.tokenize(text.value(), r.add_special_tokens);
  if (!tokens.ok()) return from_status(tokens.status(), "messages");
  std::vector<std::int32_t> ids = std::move(tokens).value();
  if (ids.empty()) return bad_request("'messages' have no tokens", "messages");
  // Unset max_tokens: whatever the context has room for.
  const int room = card.max_model_len - static_cast<int>(ids.size());
  r.stop.max_tokens = r.max_tokens.value_or(std::max(room, 1));
  if (auto e =
          check_context(ids.size(), r.stop.max_tokens, card.max_model_len, "messages", max_param)) {
    return *e;
  }
  if (r.stop.min_tokens > r.stop.max_tokens) {
    return bad_request(fmt::format("'min_tokens' ({}) must not exceed the {} "
                                   "tokens left in the context",
                                   r.stop.min_tokens, r.stop.max_tokens),
                       "min_tokens");
  }
  return ids;
}

// "/v1/responses/{id}" -> id; "" for any other path.
std::string_view response_id_of(std::string_view path) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  if (path.size() <= kPrefix.size() || path.substr(0, kPrefix.size()) != kPrefix) return {};
  std::string_view id = path.substr(kPrefix.size());
  return id.find('/') == std::string_view::npos ? id : std::string_view();
}

// OpenAI's answer for an id it does not have (unknown, deleted or evicted).
ApiError response_not_found(std::string_view id, bool previous) {
  ApiError e;
  e.http_status = 404;
  e.message =
      fmt::format("{} with id '{}' not found.", previous ? "Previous response" : "Response", id);
  e.param = previous ? "previous_response_id" : "";
  e.code = previous ? "previous_response_not_found" : "not_found";
  return e;
}

}  // namespace

Reply error_reply(const ApiError& error) {
  Reply r{error.http_status, "application/json", error_body(error), {}};
  if (error.http_status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

Route match_route(std::string_view method, std::string_view path) {
  struct Entry {
    std::string_view path;
    std::string_view method;
    Route route;
  };
  static constexpr Entry kRoutes[] = {
      {"/health", "GET", Route::health},
      {"/metrics", "GET", Route::metrics},
      {"/version", "GET", Route::version},
      {"/v1/models", "GET", Route::models},
      {"/v1/completions", "POST", Route::completions},
      {"/v1/chat/completions", "POST", Route::chat_completions},
      {"/v1/responses", "POST", Route::responses},
      {"/tokenize", "POST", Route::tokenize},
      {"/detokenize", "POST", Route::detokenize},
  };
  for (const Entry& e : kRoutes) {
    if (e.path != path) continue;
    if (e.method == method || (e.method == "GET" && method == "HEAD")) return e.route;
    return Route::method_not_allowed;
  }
  if (!response_id_of(path).empty()) {
    if (method == "GET" || method == "HEAD") return Route::response_get;
    if (method == "DELETE") return Route::response_delete;
    return Route::method_not_allowed;
  }
  return Route::not_found;
}

bool route_has_body(Route route) {
  switch (route) {
    case Route::completions:
    case Route::chat_completions:
    case Route::responses:
    case Route::tokenize:
    case Route::detokenize: return true;
    default: return false;
  }
}

bool ApiRoutes::authorized(std::string_view header) const {
  if (state_.api_key.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() <= kBearer.size() || header.substr(0, kBearer.size()) != kBearer) return false;
  return constant_time_equal(header.substr(kBearer.size()), state_.api_key);
}

std::optional<Reply> ApiRoutes::admit(Route route, std::string_view authorization) const {
  switch (route) {
    case Route::not_found:
    case Route::method_not_allowed: return std::nullopt;  // the session names method and path
    case Route::metrics:
    case Route::version: return std::nullopt;  // open, and served while loading
    case Route::health: return std::nullopt;   // info() says 503 while loading or draining
    default: break;
  }
  if (!authorized(authorization)) return error_reply(unauthorized());
  const bool generation =
      route == Route::completions || route == Route::chat_completions || route == Route::responses;
  if (generation && state_.draining.load()) {
    return error_reply(service_unavailable("The server is shutting down"));
  }
  ServingBackend* b = state_.backend.load();
  if (b == nullptr || !b->ready()) {
    return error_reply(service_unavailable("The model is still loading"));
  }
  return std::nullopt;
}

Reply ApiRoutes::info(Route route, std::string_view path) const {
  ServingBackend* b = state_.backend.load();
  switch (route) {
    case Route::health:
      if (state_.draining.load()) {
        return error_reply(service_unavailable("The server is shutting down"));
      }
      if (b == nullptr || !b->ready()) {
        return error_reply(service_unavailable("The model is still loading"));
      }
      return {200, "text/plain; charset=utf-8", "", {}};
    case Route::metrics: {
      // Before the model is attached: the engine's metrics at zero, no model name.
      if (b == nullptr) {
        return {200,
                "text/plain; version=0.0.4; charset=utf-8",
                render_metrics(engine::EngineMetrics().snapshot(), "", {}, state_.metrics),
                {}};
      }
      return {200,
              "text/plain; version=0.0.4; charset=utf-8",
              render_metrics(b->metrics(), b->model().id, b->model().cache_config, state_.metrics),
              {}};
    }
    case Route::version: return json_reply(200, {{"version", build_info::version}});
    case Route::models: return json_reply(200, models_response(b->model()));  // admitted: b is set
    case Route::response_get:
    case Route::response_delete: return stored_response(route, path);
    default: return error_reply(server_error("not an info route"));
  }
}

RouteOutcome ApiRoutes::handle(Route route, const std::string& body,
                               std::function<void()> notify) const {
  ServingBackend* b = state_.backend.load();  // admitted: set and ready
  try {
    switch (route) {
      case Route::completions: return completions(body, *b, std::move(notify));
      case Route::chat_completions: return chat_completions(body, *b, std::move(notify));
      case Route::responses: return responses(body, *b, std::move(notify));
      case Route::tokenize: return {tokenize(body, *b), {}};
      case Route::detokenize: return {detokenize(body, *b), {}};
      default: return error_outcome(server_error("not a body route"));
    }
  } catch (const std::exception& e) {
    return error_outcome(server_error(fmt::format("Internal error: {}", e.what())));
  }
}

RouteOutcome ApiRoutes::completions(const std::string& body, ServingBackend& backend,
                                    std::function<void()> notify) const {
  const ModelCard& card = backend.model();
  auto parsed = parse_completion_request(body, limits_for(card));
  if (!parsed.ok()) return error_outcome(parsed.error());
  CompletionRequest& r = parsed.value();
  if (!r.model.empty() && !card.serves(r.model)) return error_outcome(model_not_found(r.model));

  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::string> echo_texts;
  for (Prompt& p : r.prompts) {
    std::vector<std::int32_t> ids = std::move(p.token_ids);
    if (!p.is_token_ids) {
      auto tokens = backend.tokenize(p.text, r.add_special_tokens);
      if (!tokens.ok()) return error_outcome(from_status(tokens.status(), "prompt"));
      ids = std::move(tokens).value();
      if (ids.empty()) return error_outcome(bad_request("'prompt' has no tokens", "prompt"));
    }
    if (auto e = check_context(ids.size(), r.stop.max_tokens, card.max_model_len, "prompt")) {
      return error_outcome(*e);
    }
    if (r.echo) {
      if (p.is_token_ids) {
        auto text = backend.detokenize(ids, r.stop.skip_special_tokens);
        if (!text.ok()) return error_outcome(from_status(text.status(), "prompt"));
        echo_texts.push_back(std::move(text).value());
      } else {
        echo_texts.push_back(std::move(p.text));
      }
    }
    prompts.push_back(std::move(ids));
  }
  ResponseOptions options = response_options(Endpoint::completions, r.output);
  options.echo_logprobs = r.echo_logprobs;
  options.logprobs_top = r.sampling.logprobs.value_or(0);
  return start_generation(backend, std::move(options), r.sampling, r.stop, r.cache_salt,
                          r.constraint, std::move(prompts), std::move(echo_texts),
                          std::move(notify));
}

RouteOutcome ApiRoutes::chat_completions(const std::string& body, ServingBackend& backend,
                                         std::function<void()> notify) const {
  const ModelCard& card = backend.model();
  auto parsed = parse_chat_request(body, limits_for(card));
  if (!parsed.ok()) return error_outcome(parsed.error());
  ChatRequest& r = parsed.value();
  if (!r.model.empty() && !card.serves(r.model)) return error_outcome(model_not_found(r.model));

  // Tools: how the output is parsed, and the grammar a required or named
  // tool_choice is held to (tool_request.h).
  auto parsing = chat_output_config(r.tools, card.tool_serving);
  if (!parsing.ok()) return error_outcome(parsing.error());
  auto constraint = tool_constraint(r.tools);
  if (!constraint.ok()) return error_outcome(constraint.error());
  adjust_stop_params(parsing.value(), r.stop);

  auto ids = chat_prompt(backend, r);
  if (!ids.ok()) return error_outcome(ids.error());
  std::vector<std::vector<std::int32_t>> prompts;
  prompts.push_back(std::move(ids).value());
  ResponseOptions options = response_options(Endpoint::chat, r.output);
  options.chat_output = std::move(parsing).value();
  // A required or named tool_choice overrides response_format and
  // structured_outputs, as in vLLM.
  const grammar::Constraint& held = constraint->active() ? constraint.value() : r.constraint;
  return start_generation(backend, std::move(options), r.sampling, r.stop, r.cache_salt, held,
                          std::move(prompts), {}, std::move(notify));
}

// POST /v1/responses: the conversation (instructions, the previous
// response's turns, this input) and the tools go through the chat path; the
// builder answers in the Responses shape (text and function calls) and keeps
// the finished response.
RouteOutcome ApiRoutes::responses(const std::string& body, ServingBackend& backend,
                                  std::function<void()> notify) const {
  const ModelCard& card = backend.model();
  auto parsed = parse_responses_request(body, limits_for(card));
  if (!parsed.ok()) return error_outcome(parsed.error());
  ResponsesRequest& r = parsed.value();
  ChatRequest& chat = r.chat;
  if (!chat.model.empty() && !card.serves(chat.model)) {
    return error_outcome(model_not_found(chat.model));
  }
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  if (r.previous_response_id) {
    auto previous = state_.responses.find(*r.previous_response_id);
    if (!previous) return error_outcome(response_not_found(*r.previous_response_id, true));
    conversation = previous->conversation;
  }
  for (const auto& m : chat.messages) conversation.push_back(m);
  chat.messages = nlohmann::ordered_json::array();
  if (r.instructions) chat.messages.push_back({{"role", "system"}, {"content", *r.instructions}});
  for (const auto& m : conversation) chat.messages.push_back(m);

  // Function tools as chat completions take them (tool_request.h); the
  // reasoning parser is not applied here (no reasoning output items), so a
  // think block stays in the text.
  auto parsing = chat_output_config(chat.tools, card.tool_serving);
  if (!parsing.ok()) return error_outcome(parsing.error());
  parsing->reasoning = chat_output::ReasoningParserKind::none;
  auto constraint = tool_constraint(chat.tools);
  if (!constraint.ok()) return error_outcome(constraint.error());
  adjust_stop_params(parsing.value(), chat.stop);

  auto ids = chat_prompt(backend, chat, "max_output_tokens");
  if (!ids.ok()) return error_outcome(ids.error());
  ResponsesOptions options;
  options.id = request_id("resp_");
  options.message_id = request_id("msg_");
  options.created_at = static_cast<std::int64_t>(std::time(nullptr));
  options.model = card.id;
  options.stream = chat.output.stream;
  options.prompt_tokens = static_cast<int>(ids->size());
  options.echoed = {
      {"instructions", r.instructions ? json(*r.instructions) : json(nullptr)},
      {"max_output_tokens", r.max_output_tokens ? json(*r.max_output_tokens) : json(nullptr)},
      {"max_tool_calls", nullptr},
      {"metadata", json(r.metadata)},
      {"previous_response_id",
       r.previous_response_id ? json(*r.previous_response_id) : json(nullptr)},
      {"store", r.store},
      {"temperature", chat.sampling.temperature},
      {"top_p", chat.sampling.top_p},
      {"user", r.user ? json(*r.user) : json(nullptr)},
      {"tools", r.tools_echo},
      {"tool_choice", r.tool_choice_echo},
      {"text", {{"format", r.text_format_echo}}},
      {"parallel_tool_calls", chat.tools.parallel_tool_calls},
  };
  options.conversation = std::move(conversation);
  if (r.store) options.store = &state_.responses;
  options.tool_output = std::move(parsing).value();

  // A required or named tool_choice overrides structured_outputs, as on chat.
  const grammar::Constraint& held = constraint->active() ? constraint.value() : chat.constraint;
  engine::RequestSpec spec{std::move(ids).value(), chat.sampling, chat.stop, chat.cache_salt, held};
  std::vector<engine::RequestSpec> specs;
  specs.push_back(std::move(spec));
  auto call = GenerationCall::start(backend, std::move(specs), std::move(notify));
  if (!call.ok()) return error_outcome(call.error());
  std::string id = options.id;
  Generation g;
  g.call = std::move(call).value();
  g.stream = options.stream;
  g.builder = std::make_unique<ResponsesBuilder>(std::move(options));
  return {std::move(g), std::move(id)};
}

// GET /v1/responses/{id} (the stored response) and DELETE (forgets it).
Reply ApiRoutes::stored_response(Route route, std::string_view path) const {
  const std::string id(response_id_of(path));
  if (route == Route::response_delete) {
    if (!state_.responses.erase(id)) return error_reply(response_not_found(id, false));
    return json_reply(200, {{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  }
  auto stored = state_.responses.find(id);
  if (!stored) return error_reply(response_not_found(id, false));
  return json_reply(200, stored->response);
}

Reply ApiRoutes::tokenize(const std::string& body, ServingBackend& backend) const {
  const ModelCard& card = backend.model();
  auto parsed = parse_tokenize_request(body, limits_for(card));
  if (!parsed.ok()) return error_reply(parsed.error());
  const TokenizeRequest& r = parsed.value();
  if (!r.model.empty() && !card.serves(r.model)) return error_reply(model_not_found(r.model));
  std::string text = r.prompt;
  if (r.is_chat) {
    auto rendered = backend.apply_chat_template(r.messages, r.chat_template);
    if (!rendered.ok()) return error_reply(from_status(rendered.status(), "messages"));
    text = std::move(rendered).value();
  }
  auto tokens = backend.tokenize(text, r.add_special_tokens);
  if (!tokens.ok()) return error_reply(from_status(tokens.status()));
  json token_strs = nullptr;
  if (r.return_token_strs) {
    token_strs = json::array();
    for (std::int32_t t : tokens.value()) token_strs.push_back(utf8::lossy(backend.token_bytes(t)));
  }
  return json_reply(200, {{"count", tokens->size()},
                          {"max_model_len", card.max_model_len},
                          {"tokens", tokens.value()},
                          {"token_strs", std::move(token_strs)}});
}

Reply ApiRoutes::detokenize(const std::string& body, ServingBackend& backend) const {
  const ModelCard& card = backend.model();
  auto parsed = parse_detokenize_request(body, limits_for(card));
  if (!parsed.ok()) return error_reply(parsed.error());
  const DetokenizeRequest& r = parsed.value();
  if (!r.model.empty() && !card.serves(r.model)) return error_reply(model_not_found(r.model));
  auto text = backend.detokenize(r.tokens, /*skip_special_tokens=*/false);
  if (!text.ok()) return error_reply(from_status(text.status(), "tokens"));
  return json_reply(200, {{"prompt", text.value()}});
}

}  // namespace vpod::server
