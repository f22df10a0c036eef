// What some transports can do beyond moving tagged messages (transport.hpp). Each capability is
// an interface of its own that a transport class implements when it has it; whoever holds a
// Transport asks once which it has (capability<...>), as the router does when it is built.
//
//   CombiningReceive   a receive that reduces as it lands               tcp, shm
//   CallerDrive        the caller's thread progresses the transport     tcp, ucx, shm
//   SharedBoardAccess  memory every rank of the communicator can read   shm
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/completion.hpp"
#include "transports/combine.hpp"
#include "transports/shared_board.hpp"
#include "transports/transport.hpp"

namespace holmes {

class CombiningReceive {
 public:
  virtual ~CombiningReceive() = default;

  // A receive that leaves reduce(dtype, op, in, message) in `data` (combine.hpp), combined
  // where the payload arrives instead of being copied aside first. `data.size()` must be a
  // whole number of elements. Returns nullptr when the transport is told not to (or its link to
  // `peer` cannot): the caller then receives with irecv() and reduces itself. Nothing changes on
  // the wire: the sender cannot tell.
  virtual CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                     std::span<std::byte> data, const ReceiveCombine& combine) = 0;
};

class CallerDrive {
 public:
  virtual ~CallerDrive() = default;

  // The calling thread is about to drive this transport itself for a short while: it will post
  // and wait (polling) within microseconds, so peers need not wake the transport's own thread
  // for news meanwhile (on shared memory a wake-up is a system call for the sender and a context
  // switch for the receiver, more than a small collective costs). Ends with end_caller_drive on
  // the same thread, or earlier by itself when that thread goes to sleep in a wait. Nesting is
  // not allowed.
  virtual void begin_caller_drive() = 0;
  virtual void end_caller_drive() = 0;
  // What a thread that drives this transport polls while it waits on any of its requests
  // (Completion::wait_until's `drive`); nullptr when its waiters do not poll (then a drive is
  // ignored too: such a caller could not keep its promise).
  virtual Progress* caller_progress() = 0;
  // How long a caller waiting for traffic with `peer` should yield the core before sleeping:
  // worth it where completions arrive in microseconds (shared memory, a driving caller),
  // harmful where another thread of this process must run to complete them (a socket's io
  // thread during a large transfer).
  virtual std::chrono::microseconds yield_before_sleep(int peer) const = 0;
};

class SharedBoardAccess {
 public:
  virtual ~SharedBoardAccess() = default;

  // Memory every rank of the communicator can read (shared_board.hpp).
  virtual SharedBoard& shared_board() = 0;
  // Fails a receive posted earlier that is no longer wanted (it completes with HM_ERR_ABORTED);
  // nothing if it has finished. For the receive a board wait posts so that the matcher knows
  // this rank's call in its slot (collectives/shared_memory.cpp).
  virtual void cancel_receive(int peer, std::uint64_t tag) = 0;
};

// A transport that can tell its peers it is being revoked (tcp's notices, frame.hpp): shuts down
// like shutdown(HM_ERR_ABORTED, why, kReturnAtOnce), after a notice to every connected peer, whose
// transport then fails this rank's traffic with HM_ERR_ABORTED (not HM_ERR_PEER_FAILED: the rank
// is alive). Never blocks.
class PeerRevocation {
 public:
  virtual ~PeerRevocation() = default;
  virtual void revoke(const std::string& why) = 0;
};

// `transport` as `Capability`, or nullptr when it does not have it.
template <typename Capability>
Capability* capability(Transport& transport) {
  return dynamic_cast<Capability*>(&transport);
}

}  // namespace holmes
