// The one interface every transport implements, shaped like NCCL's net plugin: an endpoint
// listens, learns where its peers listen, and moves tagged messages with nonblocking
// isend/irecv whose Requests complete later. What only some transports can do (combining
// receives, caller drive, a shared board) are capability interfaces of their own
// (capabilities.hpp). A communicator talks to its transports through the router (router.hpp),
// which sends each peer's traffic through the transport chosen for it; collectives see the
// router and never know which transport carries them.
//
// Contract:
//  - A (peer, tag) pair names at most one message in flight in each direction; the layer above
//    makes tags unique (operation sequence number + step + chunk).
//  - The receiver's buffer size must equal the message size and the sender's signature (a hash
//    of the operation: collective, count, dtype, op, root) must equal the receiver's; otherwise
//    the receive completes with HM_ERR_MISMATCH.
//  - Buffers passed to isend/irecv belong to the transport until their Request completes, or
//    until shutdown() has returned.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/completion.hpp"

namespace holmes {

// What a link can carry: the transport's name and its nominal speed, for logs, queries and (in
// time) the cost model.
struct LinkProperties {
  std::string transport;        // "tcp", "ucx", "shm", ...
  std::string description;      // e.g. "tcp 10.0.0.2:41234 x2 sockets"
  double bandwidth_gbytes = 0;  // nominal bandwidth, GB/s; 0 when unknown
  double latency_us = 0;        // nominal one-way latency; 0 when unknown
};

// How shutdown() returns: at once (hm_comm_abort: waiters wake shortly after), or only once no
// buffer handed to the transport will be touched again.
enum class ShutdownWait : bool { kReturnAtOnce = false, kUntilReleased = true };

class Transport {
 public:
  // Called on the transport's own thread when it sees a peer fail or close (tcp sees closed
  // sockets). The callback must not block.
  using PeerFailureListener =
      std::function<void(int peer, hm_status_t status, const std::string& message)>;

  virtual ~Transport() = default;

  virtual const char* name() const = 0;

  // Where peers reach this endpoint; exchanged by the communicator (store or parent comm).
  virtual std::string listen_address() const = 0;

  // Set before set_peers. The router listens to its control plane (tcp) to fail a peer's
  // traffic on the transports that cannot see it go (shm, ucx).
  virtual void set_peer_failure_listener(PeerFailureListener listener) = 0;

  // Told, on the transport's thread, of every point-to-point message (tag kind 01) that starts
  // to arrive before its receive is posted: how receives from any source learn the order
  // messages arrive in (arrival_order.hpp). The listener must not block or call the transport.
  // Set before set_peers; every transport that matches messages hands it to its Matcher.
  using ArrivalListener = std::function<void(int peer, std::uint64_t tag)>;
  virtual void set_arrival_listener(ArrivalListener listener) = 0;

  // This endpoint's rank and where every rank listens (index = rank). An empty address marks a
  // peer this transport does not serve (another transport carries its traffic). Called once,
  // before any isend/irecv; until then, incoming connections wait.
  virtual void set_peers(int rank, std::vector<std::string> addresses) = 0;

  // Starts connecting to every peer now instead of on first use; the completion ends when this
  // endpoint's connections to all peers are up (or with the first failure). With every pair
  // connected up front, a peer that goes away is noticed at once by everyone waiting on it.
  virtual CompletionPtr connect_all() = 0;

  virtual CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                              std::span<const std::byte> data) = 0;
  virtual CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                              std::span<std::byte> data) = 0;

  // Fails everything pending with `peer` and all later traffic with it. The router calls this
  // when the control plane sees the peer go, for transports (shm, ucx) that cannot see it.
  virtual void fail_peer(int peer, hm_status_t status, const std::string& message) = 0;

  // Fails every pending and future operation with `status` and closes all connections; returns
  // as `wait` says.
  virtual void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) = 0;

  virtual LinkProperties link(int peer) const = 0;
};

}  // namespace holmes
