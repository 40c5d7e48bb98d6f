// The open connections of one server: counted against --max-connections,
// found again to close idle ones when the limit is reached, to abort their
// generations at the drain deadline, and to close them all at shutdown.
//
// Threading: every method may be called from any thread (one mutex); the
// sessions' own work happens on their strands, reached through post_*().
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

namespace vpod::server {

class HttpSession;
class ServerMetrics;

class ConnectionRegistry {
 public:
  struct Slot {
    std::weak_ptr<HttpSession> session;
    bool idle = false;
  };
  using Entry = std::list<Slot>::iterator;

  // `metrics` (may be null) gets the open and idle counts.
  ConnectionRegistry(std::size_t max_connections, ServerMetrics* metrics)
      : max_(max_connections), metrics_(metrics) {}

  // Registers a new connection when there is room, making room by closing
  // the connection idle the longest when the limit is reached; false when
  // every connection is busy (the newcomer is refused).
  bool add(const std::shared_ptr<HttpSession>& session, Entry& entry);
  void remove(Entry entry);
  // An idle connection waits for its next request and may be closed for room.
  void set_idle(Entry entry, bool idle);

  std::size_t size() const;
  // Calls `f` on every live session (outside the lock).
  void for_each(const std::function<void(HttpSession&)>& f);

 private:
  // Under mutex_: true when there is room, closing the longest-idle session
  // (returned in `evicted`, to be closed outside the lock) if needed.
  bool make_room(std::shared_ptr<HttpSession>& evicted);
  // Under mutex_: publishes the counts to metrics_.
  void publish();

  mutable std::mutex mutex_;
  std::size_t max_;
  ServerMetrics* metrics_;
  std::size_t num_idle_ = 0;
  // A session moves to the back when it becomes idle, so the first idle one
  // from the front is the one idle longest.
  std::list<Slot> slots_;
};

}  // namespace vpod::server
