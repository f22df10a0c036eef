// A shared board: memory that every rank of a one-host communicator can read, where each rank
// publishes the buffer of a small collective and reads everyone else's. An allreduce of a few
// KiB then costs one publication and one read per peer instead of log2(n) rounds of messages,
// each with its request, matching and wake-up (collectives/shared_memory.cpp).
//
// Rounds: the communicator's board operations are numbered 1, 2, 3 ... in the order they run,
// the same on every rank. Each rank has two slots and round r uses slot r % 2: a rank writes
// round r + 1 only after it has read every peer's round r, and each peer published round r only
// after it had read everyone's round r - 1, which used the slot being overwritten. So a slot is
// never rewritten while someone may still read it, without any acknowledgement. That holds
// only if every rank waits for every peer's publication in every round, whatever it needs of it.
//
// Peers' slots are read straight from their memory: what a reader trusts (the round, the size)
// is checked before use; the data itself is the peer's to get right.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace holmes {

// What a peer published for a round.
struct BoardEntry {
  std::uint64_t sequence = 0;  // the operation number it published it for
  std::uint32_t signature = 0;
  int root = -1;  // the root it named (-1: not a rooted collective), for messages
  std::span<const std::byte> data;
};

class SharedBoard {
 public:
  virtual ~SharedBoard() = default;

  // The largest buffer one slot holds.
  virtual std::size_t slot_bytes() const = 0;

  // Starts the next round; returns its number.
  virtual std::uint64_t begin_round() = 0;
  // This rank's slot for `round`, slot_bytes() long: write the buffer, then publish.
  virtual std::span<std::byte> own_slot(std::uint64_t round) = 0;
  virtual void publish(std::uint64_t round, std::uint64_t sequence, std::uint32_t signature,
                       int root, std::size_t bytes) = 0;

  // What `peer` published for `round`, or nullopt while it has not yet. Throws holmes::Error
  // when it never will: HM_ERR_PEER_FAILED (the peer failed or closed), this endpoint's final
  // status once it has shut down, HM_ERR_TRANSPORT for a slot that makes no sense (a round
  // ahead of this one, a size above slot_bytes()).
  virtual std::optional<BoardEntry> read(int peer, std::uint64_t round) = 0;

  // Blocks until `peer` may have published `round` (it has, or something changed in its slot),
  // at most `timeout`. For waiters that have yielded for a while without seeing it.
  virtual void sleep_until_published(int peer, std::uint64_t round,
                                     std::chrono::microseconds timeout) = 0;
};

}  // namespace holmes
