// The Responses API's memory: finished responses kept (when `store` is true)
// so that a later request can continue one with `previous_response_id`, and
// GET/DELETE /v1/responses/{id} can read or drop it. Bounded by a count and a
// byte budget; the oldest are evicted first. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace vpod::server {

struct ResponseStoreLimits {
  std::size_t max_responses = 1024;               // 0: nothing is kept
  std::size_t max_bytes = std::size_t{64} << 20;  // JSON bytes of responses + conversations
};

struct StoredResponse {
  std::string id;
  nlohmann::json response;  // the response object as it was returned
  // The conversation it ends, as chat messages ({role, content}), without
  // its instructions (OpenAI does not carry them over): earlier turns, its
  // input, then its output as an assistant message.
  nlohmann::ordered_json conversation;
  std::size_t bytes = 0;  // what it counts against the budget
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreLimits limits = {}) : limits_(limits) {}

  // Set once, before serving.
  void set_limits(ResponseStoreLimits limits);
  // Keeps `entry` (replacing one with its id), evicting the oldest until
  // within the bounds. An entry larger than the whole budget is not kept.
  void put(StoredResponse entry);
  // nullptr when unknown or evicted.
  std::shared_ptr<const StoredResponse> find(const std::string& id) const;
  // Whether it was there.
  bool erase(const std::string& id);

  std::size_t size() const;
  std::size_t bytes() const;

 private:
  using Order = std::list<std::shared_ptr<const StoredResponse>>;  // oldest first
  void erase_locked(Order::iterator it);

  mutable std::mutex mutex_;
  ResponseStoreLimits limits_;
  Order order_;
  std::unordered_map<std::string, Order::iterator> by_id_;
  std::size_t bytes_ = 0;
};

}  // namespace vpod::server
