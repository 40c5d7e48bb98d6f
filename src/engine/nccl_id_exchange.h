// NCCL's bootstrap across hosts (--nnodes > 1): global rank 0 (node 0) makes
// the NCCL unique id and serves it over TCP at --master-addr:--master-port;
// every other node connects and reads it, then all ranks call
// ncclCommInitRank with it (NCCL's own bootstrap takes over from there).
// The wire: the client sends "VPODNCCL" and its node rank (4 bytes, little
// endian); the server answers "VPODNCCL" and the id's 128 bytes. The server
// serves each node rank 1..nnodes-1 once and returns when all have it.
#pragma once

#include <chrono>
#include <memory>

#include "common/status.h"
#include "engine/engine_stack.h"
#include "model/nccl_communicator.h"

namespace vpod::engine {

class NcclIdServer {
 public:
  // Listens on options.master_addr:port (port 0: any free port, for tests).
  static Result<std::unique_ptr<NcclIdServer>> listen(const DistributedOptions& options, int port);
  ~NcclIdServer();
  NcclIdServer(const NcclIdServer&) = delete;
  NcclIdServer& operator=(const NcclIdServer&) = delete;

  int port() const;
  // Serves `id` to nodes 1..nnodes-1; deadline_exceeded naming the nodes
  // that did not come within `timeout`.
  Status serve(const model::NcclId& id, std::chrono::milliseconds timeout);

 private:
  struct Impl;
  explicit NcclIdServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A node other than 0: connects to master_addr:port (retrying while node 0
// is not listening yet) and reads the id.
Result<model::NcclId> fetch_nccl_id(const DistributedOptions& options, int port,
                                    std::chrono::milliseconds timeout);

}  // namespace vpod::engine
