#include "server/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace vpod::server {
namespace {

bool endpoint(int fd, bool peer, std::string& addr, int& port) {
  sockaddr_storage storage{};
  socklen_t len = sizeof(storage);
  auto* sa = reinterpret_cast<sockaddr*>(&storage);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return false;
  if (storage.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
  } else if (storage.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port);
  } else {
    return false;
  }
  char host[NI_MAXHOST];
  if (getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return false;
  addr = host;
  return true;
}

bool matches(int fd, const ConnectionAddress& a) {
  std::string addr;
  int port = -1;
  if (!endpoint(fd, /*peer=*/true, addr, port) || port != a.remote_port || addr != a.remote_addr) {
    return false;
  }
  return endpoint(fd, /*peer=*/false, addr, port) && port == a.local_port && addr == a.local_addr;
}

// Calls `f(fd)` for every descriptor number open in this process.
template <typename F>
void for_each_open_fd(F f) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int dir_fd = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == dir_fd || fd <= 2) continue;
    if (f(fd)) break;
  }
  closedir(dir);
}

}  // namespace

int find_connection_socket(const ConnectionAddress& address) {
  // A worker thread serves one connection at a time, usually many requests on it.
  thread_local int cached = -1;
  if (cached >= 0 && matches(cached, address)) return cached;
  cached = -1;
  for_each_open_fd([&](int fd) {
    if (!matches(fd, address)) return false;
    cached = fd;
    return true;
  });
  return cached;
}

int shutdown_connections(int local_port) {
  int count = 0;
  for_each_open_fd([&](int fd) {
    std::string addr;
    int port = -1;
    // A connected socket on our port: getpeername fails for the listener.
    if (endpoint(fd, /*peer=*/false, addr, port) && port == local_port &&
        endpoint(fd, /*peer=*/true, addr, port) && ::shutdown(fd, SHUT_RDWR) == 0) {
      ++count;
    }
    return false;
  });
  return count;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace vpod::server
