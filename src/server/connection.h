// The client's socket behind an HTTP request, to notice a client that has
// gone away while its request waits for tokens.
//
// cpp-httplib 0.11 does not hand handlers their socket, and its
// DataSink::is_writable() only selects for writability (true for a socket
// whose peer has closed). But every connection is served start to end by one
// worker thread, and a TCP connection is the only open socket with its
// (local, peer) address pair, so the socket can be found once per connection
// and cached per thread.
#pragma once

#include <string>

namespace vpod::server {

struct ConnectionAddress {
  std::string local_addr;  // numeric, as cpp-httplib reports it
  int local_port = -1;
  std::string remote_addr;
  int remote_port = -1;
};

// The open socket with these addresses, or -1 when none is found.
int find_connection_socket(const ConnectionAddress& address);

// Shuts down both directions of every connected TCP socket of this process
// whose local port is `local_port` (a server's accepted connections), so
// worker threads idling on keep-alive connections return at once. Returns
// how many. For shutdown, after the listener is closed.
int shutdown_connections(int local_port);

// True when the peer has closed or reset the connection (it can no longer
// read what we would send). Does not block and does not consume input.
bool peer_closed(int fd);

}  // namespace vpod::server
