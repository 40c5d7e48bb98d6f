// The OpenAI-compatible API behind the HTTP transport: which route a request
// names, whether it may proceed (decided from its head, before its body is
// read), and what it answers. Independent of sockets: a route returns a
// whole reply, or a started generation that the connection then drives
// (http_session.h).
//
// Threading: head checks and the info routes are cheap and run on an event
// loop thread; handle() may take a while (body parsing, tokenizing, chat
// templates) and runs on the worker pool. All of them may run concurrently.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/generation_call.h"
#include "server/metrics.h"
#include "server/openai_json.h"
#include "server/response_store.h"

namespace vpod::server {

enum class Route {
  health,
  metrics,
  version,
  models,
  completions,
  chat_completions,
  responses,        // POST /v1/responses
  response_get,     // GET /v1/responses/{id}
  response_delete,  // DELETE /v1/responses/{id}
  tokenize,
  detokenize,
  not_found,           // no such path
  method_not_allowed,  // a known path with another method
};

// GET routes answer HEAD too (headers only).
Route match_route(std::string_view method, std::string_view path);
// Whether the route needs its body and the worker pool (handle()).
bool route_has_body(Route route);

// A complete answer.
struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides the standard ones
};
Reply error_reply(const ApiError& error);

// A generation the connection drives: deltas go into the builder until every
// choice has finished (then, when not streamed, builder->response()).
struct Generation {
  std::unique_ptr<GenerationCall> call;
  std::unique_ptr<OutputBuilder> builder;
  bool stream = false;
};

struct RouteOutcome {
  std::variant<Reply, Generation> result;
  std::string request_id;  // the response's id when there is one ("cmpl-...")
};

// The server-wide state routes read: set once, or atomics.
struct ApiState {
  std::string api_key;  // "": no authentication
  std::atomic<ServingBackend*> backend{nullptr};
  std::atomic<bool> draining{false};
  ServerMetrics metrics;
  ResponseStore responses;  // for previous_response_id and /v1/responses/{id}
};

class ApiRoutes {
 public:
  explicit ApiRoutes(ApiState& state) : state_(state) {}

  // From the head alone: 401 without the key, 503 while loading or (for
  // generation) draining, 404/405 for no route. std::nullopt: go on.
  std::optional<Reply> admit(Route route, std::string_view authorization) const;
  // /health, /metrics, /version, /v1/models, /v1/responses/{id}: cheap, no
  // body. `path`: the request's, for the routes that take an id from it.
  Reply info(Route route, std::string_view path = {}) const;
  // The body routes. `notify` is handed to a generation's GenerationCall (it
  // runs on the engine thread when tokens arrive).
  RouteOutcome handle(Route route, const std::string& body, std::function<void()> notify) const;

 private:
  RouteOutcome completions(const std::string& body, ServingBackend& backend,
                           std::function<void()> notify) const;
  RouteOutcome chat_completions(const std::string& body, ServingBackend& backend,
                                std::function<void()> notify) const;
  RouteOutcome responses(const std::string& body, ServingBackend& backend,
                         std::function<void()> notify) const;
  Reply stored_response(Route route, std::string_view path) const;
  Reply tokenize(const std::string& body, ServingBackend& backend) const;
  Reply detokenize(const std::string& body, ServingBackend& backend) const;
  bool authorized(std::string_view authorization) const;

  ApiState& state_;
};

}  // namespace vpod::server
