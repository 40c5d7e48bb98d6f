// The bounded store of finished responses (response_store.h).
#include "server/response_store.h"

namespace vpod::server {

void ResponseStore::set_limits(ResponseStoreLimits limits) {
  std::lock_guard lock(mutex_);
  limits_ = limits;
}

void ResponseStore::erase_locked(Order::iterator it) {
  bytes_ -= (*it)->bytes;
  by_id_.erase((*it)->id);
  order_.erase(it);
}

void ResponseStore::put(StoredResponse entry) {
  std::lock_guard lock(mutex_);
  if (auto it = by_id_.find(entry.id); it != by_id_.end()) erase_locked(it->second);
  if (limits_.max_responses == 0 || entry.bytes > limits_.max_bytes) return;
  while (!order_.empty() &&
         (order_.size() + 1 > limits_.max_responses || bytes_ + entry.bytes > limits_.max_bytes)) {
    erase_locked(order_.begin());
  }
  bytes_ += entry.bytes;
  const std::string id = entry.id;
  order_.push_back(std::make_shared<const StoredResponse>(std::move(entry)));
  by_id_[id] = std::prev(order_.end());
}

std::shared_ptr<const StoredResponse> ResponseStore::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : *it->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  erase_locked(it->second);
  return true;
}

std::size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

std::size_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace vpod::server
