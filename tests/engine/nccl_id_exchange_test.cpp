// The NCCL id exchange between nodes over TCP on localhost (no GPU and no
// NCCL needed: the id is opaque bytes): node 0 serves the id to every other
// node, each gets the same bytes, a node that never comes makes node 0 fail
// with its number, and a node with no server to reach times out.
#include "engine/nccl_id_exchange.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace vpod::engine {
namespace {

using std::chrono::milliseconds;

DistributedOptions nodes(int nnodes, int node_rank) {
  DistributedOptions d;
  d.nnodes = nnodes;
  d.node_rank = node_rank;
  d.master_addr = "127.0.0.1";
  return d;
}

model::NcclId some_id() {
  model::NcclId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<char>(i * 7 + 3);
  return id;
}

TEST(NcclIdExchange, NodeZeroServesTheIdToEveryOtherNode) {
  constexpr int kNodes = 3;
  auto server = NcclIdServer::listen(nodes(kNodes, 0), 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  const model::NcclId id = some_id();
  std::vector<Result<model::NcclId>> got(kNodes, invalid_argument("not run"));
  std::vector<std::thread> clients;
  for (int n = 1; n < kNodes; ++n) {
    clients.emplace_back(
        [&, n] { got[n] = fetch_nccl_id(nodes(kNodes, n), port, milliseconds(20000)); });
  }
  const Status served = (*server)->serve(id, milliseconds(20000));
  for (auto& t : clients) t.join();
  EXPECT_TRUE(served.ok()) << served.to_string();
  for (int n = 1; n < kNodes; ++n) {
    ASSERT_TRUE(got[n].ok()) << got[n].status().to_string();
    EXPECT_EQ(got[n]->bytes, id.bytes) << "node " << n;
  }
}

TEST(NcclIdExchange, AMissingNodeIsNamedAndAnUnreachableServerTimesOut) {
  auto server = NcclIdServer::listen(nodes(3, 0), 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int port = (*server)->port();
  std::thread one([&] { EXPECT_TRUE(fetch_nccl_id(nodes(3, 1), port, milliseconds(20000)).ok()); });
  const Status served = (*server)->serve(some_id(), milliseconds(5000));
  one.join();
  ASSERT_FALSE(served.ok());
  EXPECT_NE(served.message().find("node(s) 2 did not connect"), std::string::npos)
      << served.to_string();
  server->reset();  // nobody listens on `port` now

  auto lonely = fetch_nccl_id(nodes(2, 1), port, milliseconds(300));
  ASSERT_FALSE(lonely.ok());
  EXPECT_EQ(lonely.status().code(), StatusCode::unavailable);
  EXPECT_NE(lonely.status().message().find("no id from 127.0.0.1"), std::string::npos)
      << lonely.status().to_string();
  EXPECT_FALSE(fetch_nccl_id(nodes(2, 0), port, milliseconds(10)).ok());
}

}  // namespace
}  // namespace vpod::engine
