// The one interface every transport implements, shaped like NCCL's net plugin: an endpoint
// listens, learns where its peers listen, and moves tagged messages with nonblocking
// isend/irecv whose Requests complete later. Collectives are written against this interface
// only and never know which transport carries them.
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

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/completion.hpp"
#include "transports/combine.hpp"

namespace holmes {

class SharedBoard;

// What a link can carry: the transport's name and its nominal speed, for logs, queries and (in
// time) the cost model.
struct LinkProperties {
  std::string transport;        // "tcp", "ucx", "shm", ...
  std::string description;      // e.g. "tcp 10.0.0.2:41234 x2 sockets"
  double bandwidth_gbytes = 0;  // nominal bandwidth, GB/s; 0 when unknown
  double latency_us = 0;        // nominal one-way latency; 0 when unknown
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;

  // Where peers reach this endpoint; exchanged by the communicator (store or parent comm).
  virtual std::string listen_address() const = 0;

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

  // A receive that leaves reduce(dtype, op, in, message) in `data` (transports/combine.hpp), for
  // transports that can combine the payload where it arrives without copying it aside first.
  // `data.size()` must be a whole number of elements. Returns nullptr when this transport (or its
  // link to `peer`) does not do it, or is told not to: the caller then receives with irecv() and
  // reduces itself. Nothing changes on the wire: the sender cannot tell.
  virtual CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                     std::span<std::byte> data, const ReceiveCombine& combine) {
    (void)peer;
    (void)tag;
    (void)signature;
    (void)data;
    (void)combine;
    return nullptr;
  }

  // Fails every pending and future operation with `status` and closes all connections. With
  // wait == true it returns only when no buffer handed to the transport will be touched again;
  // with wait == false it returns at once (for hm_comm_abort) and waiters wake shortly after.
  virtual void shutdown(hm_status_t status, const std::string& why, bool wait) = 0;

  virtual LinkProperties link(int peer) const = 0;

  // How long a caller waiting for traffic with `peer` should yield the core before sleeping:
  // worth it where completions arrive in microseconds (shared memory), harmful where another
  // thread of this process must run to complete them (a socket's io thread).
  virtual std::chrono::microseconds yield_before_sleep(int peer) const {
    (void)peer;
    return std::chrono::microseconds(0);
  }

  // The calling thread is about to drive this transport itself for a short while: it will post
  // and wait (polling) within microseconds, so peers need not wake the transport's own thread
  // for news meanwhile (on shared memory a wake-up is a system call for the sender and a context
  // switch for the receiver, more than a small collective costs). Ends with end_caller_drive on
  // the same thread, or earlier by itself when that thread goes to sleep in a wait. Nesting is
  // not allowed. Transports without a progress thread of their own ignore it.
  virtual void begin_caller_drive() {}
  virtual void end_caller_drive() {}
  // What a thread that drives this transport polls while it waits on any of its requests
  // (Completion::wait_until's `drive`); nullptr: each request's own progress, if it has one. A
  // transport whose waiters poll returns that progress; a router that drives several carriers
  // returns all of theirs as one.
  virtual Progress* caller_progress() { return nullptr; }

  // Fails a receive posted earlier that is no longer wanted (it completes with HM_ERR_ABORTED);
  // nothing if it has finished. For the receive a shared-board wait posts so that the matcher
  // knows this rank's call in its slot (collectives/shared_memory.cpp): only transports with a
  // board (shm) get one.
  virtual void cancel_receive(int peer, std::uint64_t tag) {
    (void)peer;
    (void)tag;
  }

  // Memory every rank of the communicator can read (shared_board.hpp), where this transport
  // carries every peer and has it (shm); nullptr otherwise.
  virtual SharedBoard* shared_board() { return nullptr; }

  // Fails everything pending with `peer` and all later traffic with it. The router calls this
  // when the control plane sees the peer go, for transports (shm, ucx) that cannot see it.
  virtual void fail_peer(int peer, hm_status_t status, const std::string& message) = 0;

  // Called on the transport's own thread when it sees a peer fail or close (tcp sees closed
  // sockets). Set before set_peers; the callback must not block.
  using PeerFailureListener =
      std::function<void(int peer, hm_status_t status, const std::string& message)>;
  virtual void set_peer_failure_listener(PeerFailureListener listener) { (void)listener; }
};

}  // namespace holmes
