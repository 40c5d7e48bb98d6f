// The NCCL id exchange between nodes (nccl_id_exchange.h) over Boost.Asio:
// asynchronous accept/read/write driven by io_context::run_for, so every
// wait has the caller's deadline.
#include "engine/nccl_id_exchange.h"

#include <boost/asio.hpp>

#include <array>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include <fmt/format.h>

namespace vpod::engine {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::array<char, 8> kMagic = {'V', 'P', 'O', 'D', 'N', 'C', 'C', 'L'};
constexpr std::size_t kHelloBytes = kMagic.size() + 4;  // magic, node rank
constexpr std::size_t kReplyBytes = kMagic.size() + model::NcclId::kBytes;
// How long a node waits between attempts while node 0 is not listening yet.
constexpr auto kConnectRetry = std::chrono::milliseconds(100);

Result<tcp::endpoint> resolve(asio::io_context& ctx, const DistributedOptions& o, int port) {
  boost::system::error_code ec;
  tcp::resolver resolver(ctx);
  const auto results = resolver.resolve(o.master_addr, std::to_string(port), ec);
  if (ec || results.empty()) {
    return invalid_argument(
        fmt::format("--master-addr {}: cannot resolve: {}", o.master_addr, ec.message()));
  }
  return results.begin()->endpoint();
}

}  // namespace

struct NcclIdServer::Impl {
  asio::io_context ctx;
  tcp::acceptor acceptor{ctx};
  int nnodes = 1;
};

NcclIdServer::NcclIdServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclIdServer::~NcclIdServer() = default;

Result<std::unique_ptr<NcclIdServer>> NcclIdServer::listen(const DistributedOptions& o, int port) {
  auto impl = std::make_unique<Impl>();
  impl->nnodes = o.nnodes;
  VPOD_ASSIGN_OR_RETURN(const tcp::endpoint endpoint, resolve(impl->ctx, o, port));
  boost::system::error_code ec;
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable(fmt::format("cannot listen on {}:{} for the NCCL id exchange: {}",
                                   o.master_addr, port, ec.message()));
  }
  return std::unique_ptr<NcclIdServer>(new NcclIdServer(std::move(impl)));
}

int NcclIdServer::port() const { return impl_->acceptor.local_endpoint().port(); }

Status NcclIdServer::serve(const model::NcclId& id, std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  std::set<int> served;
  std::array<char, kReplyBytes> reply{};
  std::memcpy(reply.data(), kMagic.data(), kMagic.size());
  std::memcpy(reply.data() + kMagic.size(), id.bytes.data(), model::NcclId::kBytes);

  // One connection: read the hello, check it, answer; a bad peer is dropped.
  struct Session {
    tcp::socket socket;
    std::array<char, kHelloBytes> hello{};
  };
  std::function<void()> accept_next = [&] {
    auto session = std::make_shared<Session>(Session{tcp::socket(s.ctx)});
    s.acceptor.async_accept(session->socket, [&, session](boost::system::error_code ec) {
      if (ec) return;
      accept_next();
      asio::async_read(
          session->socket, asio::buffer(session->hello),
          [&, session](boost::system::error_code read_ec, std::size_t) {
            if (read_ec || std::memcmp(session->hello.data(), kMagic.data(), kMagic.size()) != 0) {
              return;
            }
            std::uint32_t node = 0;
            for (int i = 0; i < 4; ++i) {
              node |= static_cast<std::uint32_t>(
                          static_cast<unsigned char>(session->hello[kMagic.size() + i]))
                      << (8 * i);
            }
            if (node < 1 || node >= static_cast<std::uint32_t>(s.nnodes)) return;
            asio::async_write(session->socket, asio::buffer(reply),
                              [&, session, node](boost::system::error_code write_ec, std::size_t) {
                                if (write_ec) return;
                                served.insert(static_cast<int>(node));
                                if (static_cast<int>(served.size()) == s.nnodes - 1) s.ctx.stop();
                              });
          });
    });
  };
  if (s.nnodes > 1) {
    accept_next();
    s.ctx.restart();
    s.ctx.run_for(timeout);
    // The pending accept's handler refers to this frame: run it (aborted)
    // before returning.
    boost::system::error_code ignored;
    s.acceptor.cancel(ignored);
    s.ctx.restart();
    s.ctx.poll();
  }
  if (static_cast<int>(served.size()) == s.nnodes - 1) return {};
  std::string missing;
  for (int n = 1; n < s.nnodes; ++n) {
    if (served.count(n) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
  }
  return unavailable(fmt::format("NCCL id exchange: node(s) {} did not connect within {} ms",
                                 missing, timeout.count()));
}

Result<model::NcclId> fetch_nccl_id(const DistributedOptions& o, int port,
                                    std::chrono::milliseconds timeout) {
  if (o.node_rank < 1) return invalid_argument("fetch_nccl_id is for nodes other than node 0");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  asio::io_context ctx;
  VPOD_ASSIGN_OR_RETURN(const tcp::endpoint endpoint, resolve(ctx, o, port));
  std::array<char, kHelloBytes> hello{};
  std::memcpy(hello.data(), kMagic.data(), kMagic.size());
  for (int i = 0; i < 4; ++i) {
    hello[kMagic.size() + i] =
        static_cast<char>((static_cast<std::uint32_t>(o.node_rank) >> (8 * i)) & 0xff);
  }
  std::string last_error = "timed out";
  while (std::chrono::steady_clock::now() < deadline) {
    tcp::socket socket(ctx);
    std::array<char, kReplyBytes> reply{};
    boost::system::error_code result = asio::error::timed_out;
    socket.async_connect(endpoint, [&](boost::system::error_code ec) {
      if (ec) {
        result = ec;
        return;
      }
      asio::async_write(
          socket, asio::buffer(hello), [&](boost::system::error_code wec, std::size_t) {
            if (wec) {
              result = wec;
              return;
            }
            asio::async_read(socket, asio::buffer(reply),
                             [&](boost::system::error_code rec, std::size_t) { result = rec; });
          });
    });
    ctx.restart();
    ctx.run_until(deadline);
    if (!result && std::memcmp(reply.data(), kMagic.data(), kMagic.size()) == 0) {
      model::NcclId id;
      std::memcpy(id.bytes.data(), reply.data() + kMagic.size(), model::NcclId::kBytes);
      return id;
    }
    last_error = result ? result.message() : "bad reply";
    boost::system::error_code ignored;
    socket.close(ignored);
    ctx.restart();
    ctx.poll();  // let the closed socket's handlers finish before the next attempt
    std::this_thread::sleep_for(kConnectRetry);
  }
  return unavailable(fmt::format("NCCL id exchange: no id from {}:{} within {} ms ({})",
                                 o.master_addr, port, timeout.count(), last_error));
}

}  // namespace vpod::engine
