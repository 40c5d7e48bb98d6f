// ConnectionRegistry (connection_registry.h): counting, evicting idle, and
// closing the server's open connections.
#include "server/connection_registry.h"

#include <vector>

#include "server/http_session.h"
#include "server/metrics.h"

namespace vpod::server {

bool ConnectionRegistry::add(const std::shared_ptr<HttpSession>& session, Entry& entry) {
  // Sessions are locked (made shared) under the mutex but used and released
  // outside it: the last reference may run ~HttpSession, which removes itself.
  std::shared_ptr<HttpSession> evicted;
  {
    std::lock_guard lock(mutex_);
    if (!make_room(evicted)) return false;
    entry = slots_.insert(slots_.end(), Slot{session, false});
    publish();
  }
  if (evicted) evicted->post_close();
  return true;
}

bool ConnectionRegistry::make_room(std::shared_ptr<HttpSession>& evicted) {
  if (slots_.size() >= max_) {
    // Close the longest-idle connection; its slot is freed when it is gone,
    // so the newcomer takes the room now and the count may briefly exceed
    // the limit by the connections being closed.
    Entry victim = slots_.end();
    for (auto it = slots_.begin(); it != slots_.end(); ++it) {
      if (it->idle) {
        victim = it;
        break;
      }
    }
    if (victim == slots_.end()) return false;
    victim->idle = false;  // not chosen twice
    --num_idle_;
    evicted = victim->session.lock();
    slots_.splice(slots_.end(), slots_, victim);
  }
  return true;
}

void ConnectionRegistry::remove(Entry entry) {
  std::lock_guard lock(mutex_);
  if (entry->idle) --num_idle_;
  slots_.erase(entry);
  publish();
}

void ConnectionRegistry::set_idle(Entry entry, bool idle) {
  std::lock_guard lock(mutex_);
  if (entry->idle != idle) {
    entry->idle = idle;
    if (idle) {
      ++num_idle_;
    } else {
      --num_idle_;
    }
  }
  if (idle) slots_.splice(slots_.end(), slots_, entry);
  publish();
}

void ConnectionRegistry::publish() {
  if (metrics_ == nullptr) return;
  metrics_->num_http_connections = static_cast<int>(slots_.size());
  metrics_->num_http_connections_idle = static_cast<int>(num_idle_);
}

std::size_t ConnectionRegistry::size() const {
  std::lock_guard lock(mutex_);
  return slots_.size();
}

void ConnectionRegistry::for_each(const std::function<void(HttpSession&)>& f) {
  std::vector<std::shared_ptr<HttpSession>> live;
  {
    std::lock_guard lock(mutex_);
    live.reserve(slots_.size());
    for (Slot& slot : slots_) {
      if (auto s = slot.session.lock()) live.push_back(std::move(s));
    }
  }
  for (const auto& s : live) f(*s);
}

}  // namespace vpod::server
