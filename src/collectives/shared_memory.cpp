// Collectives through the shared board (transports/shared_board.hpp), for small buffers on one
// host. Every rank publishes in every round (its buffer, or nothing) and waits for every other
// rank's publication: allreduce reduces them all in rank order; broadcast copies the root's;
// reduce has the root reduce them; barrier only waits. There are no messages, so none of their
// costs: no request, no matching, no wake-up of another thread.
//
// Slot reuse: a rank publishes round r + 2 over its round r only after it has seen everyone's
// round r + 1, which each published after it had finished round r, reads included
// (shared_board.hpp). That holds only if every rank waits for every other in every round: a
// broadcast whose other ranks waited for the root alone could run two rounds ahead of a root
// still reading their slots (measured: it did, under the device tests).
//
// Every rank of an allreduce computes ((b0 op b1) op b2) ... from the same bytes, so the result
// is bitwise the same everywhere.
//
// Ranks that called different operations see it in the slots (the signature and operation
// number are published with the data) and fail with HM_ERR_MISMATCH; a rank that never
// publishes is named in HM_ERR_TIMEOUT; a failed peer ends the wait with its failure.
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "collectives/algorithms.hpp"
#include "core/clock.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"
#include "transports/matcher.hpp"
#include "transports/shared_board.hpp"

namespace holmes {
namespace {

// A late peer is looked for by yielding the core this long (it usually arrives within
// microseconds), then by sleeping on its slot in steps of kSleepStep (so that a failure or the
// timeout is noticed between steps).
constexpr auto kYieldFor = std::chrono::microseconds(1000);
constexpr auto kSleepStep = std::chrono::microseconds(2000);
// A step no algorithm uses (steps have 38 bits): the receive a late wait posts in its slot.
constexpr std::uint64_t kSentinelStep = (std::uint64_t{1} << 38) - 1;

BoardEntry wait_for(CollectiveContext& ctx, SharedBoard& board, int peer, std::uint64_t round) {
  if (auto entry = board.read(peer, round)) return *entry;
  // A peer this late may be in another operation of this slot, one that exchanges messages
  // (the ranks disagree). A receive posted in the slot, never matched, lets this rank's matcher
  // judge whatever the peer sends or probes here, and a probe lets the peer's matcher judge this
  // rank's call; whoever finds the disagreement tells every rank (matcher.hpp), which fails the
  // receive here, so the wait ends with HM_ERR_MISMATCH instead of the timeout.
  std::optional<Transfer> sentinel;
  struct Cancel {
    CollectiveContext& ctx;
    std::optional<Transfer>& sentinel;
    ~Cancel() {
      if (sentinel) ctx.cancel(*sentinel, kSentinelStep);
    }
  } cancel{ctx, sentinel};
  const auto start = Clock::now();
  while (true) {
    const auto waited = Clock::now() - start;
    if (waited >= ctx.timeout()) {
      fail(HM_ERR_TIMEOUT,
           "{}: timed out after {} ms waiting for rank {} to publish its buffer in shared memory "
           "(did it call the same operation?)",
           ctx.name().str(), ctx.timeout().count(), peer);
    }
    if (!sentinel && waited >= CollectiveContext::kProbeAfter) {
      sentinel = ctx.recv(peer, kSentinelStep, {});
      ctx.probe_position(peer);
    }
    if (sentinel && sentinel->request->done()) {
      // The peer may have published, finished and closed since the last read: its closing
      // fails the sentinel, but what it published before is still there and comes first.
      if (auto entry = board.read(peer, round)) return *entry;
      ctx.wait(*sentinel);  // throws its failure
    }
    if (waited < kYieldFor) {
      std::this_thread::yield();
    } else {
      board.sleep_until_published(peer, round, kSleepStep);
    }
    if (auto entry = board.read(peer, round)) return *entry;
  }
}

// Reads `peer`'s publication of `round` and checks that it belongs to this operation and
// carries `bytes`.
std::span<const std::byte> read_checked(CollectiveContext& ctx, SharedBoard& board, int peer,
                                        std::uint64_t round, std::size_t bytes) {
  const BoardEntry entry = wait_for(ctx, board, peer, round);
  if (entry.signature != ctx.signature() || entry.sequence != ctx.sequence() ||
      entry.data.size() != bytes) {
    fail(HM_ERR_MISMATCH,
         "{}{}: rank {} called a different operation (#{}{}, {} bytes, signature {:#010x}; this "
         "rank expects {} bytes, signature {:#010x}): the ranks disagree on collective, count, "
         "dtype, op, root or algorithm",
         ctx.name().str(), describe_root(ctx.root()), peer, entry.sequence,
         describe_root(entry.root), entry.data.size(), entry.signature, bytes, ctx.signature());
  }
  return entry.data;
}

// The board, or an internal error when the algorithm was chosen without one or for too much.
SharedBoard& board_for(CollectiveContext& ctx, std::size_t bytes) {
  SharedBoard* board = ctx.shared_board();
  if (board == nullptr || bytes > board->slot_bytes()) {
    fail(HM_ERR_INTERNAL, "{}: no shared board for {} bytes", ctx.name().str(), bytes);
  }
  return *board;
}

// Starts a round and publishes `bytes` of `data` (the caller's buffer, wherever it lives) in it.
// Returns the round and this rank's slot.
std::pair<std::uint64_t, std::span<std::byte>> publish(CollectiveContext& ctx, SharedBoard& board,
                                                       const void* data, std::size_t bytes) {
  const std::uint64_t round = board.begin_round();
  const std::span<std::byte> own = board.own_slot(round);
  ctx.copy_to_host(own.data(), data, bytes);
  board.publish(round, ctx.sequence(), ctx.signature(), ctx.root(), bytes);
  return {round, own};
}

// Reduces every rank's buffer (this rank's from `own`, the others' from their slots) in rank
// order into `recv`; AVG divides by the number of ranks at the end. Device buffers are reduced
// on the device, each slot copied into device scratch first.
void reduce_all(CollectiveContext& ctx, SharedBoard& board, std::uint64_t round,
                std::span<const std::byte> own, void* recv, std::size_t count, hm_dtype_t dtype,
                hm_op_t op) {
  const std::size_t bytes = own.size();
  auto* out = static_cast<std::byte*>(recv);
  std::byte* staging = ctx.on_device() ? ctx.scratch(bytes) : nullptr;
  for (int rank = 0; rank < ctx.size(); ++rank) {
    const std::byte* part =
        rank == ctx.rank() ? own.data() : read_checked(ctx, board, rank, round, bytes).data();
    if (bytes == 0) continue;  // an empty call still waits for everyone (buffers may be null)
    if (ctx.on_device()) {
      ctx.copy_from_host(rank == 0 ? out : staging, part, bytes);
      if (rank != 0) ctx.reduce(dtype, op, out, out, staging, count);
    } else if (rank == 0) {
      if (part != out) std::memmove(out, part, bytes);
    } else {
      ctx.reduce(dtype, op, out, out, part, count);
    }
  }
  if (op == HM_AVG && ctx.size() > 1 && bytes > 0) {
    ctx.finalize_average(dtype, out, count, ctx.size());
  }
}

}  // namespace

void shared_memory_allreduce(CollectiveContext& ctx, const void* send, void* recv,
                             std::size_t count, hm_dtype_t dtype, hm_op_t op) {
  const std::size_t bytes = count * dtype_size(dtype);
  SharedBoard& board = board_for(ctx, bytes);
  const auto [round, own] = publish(ctx, board, send, bytes);
  reduce_all(ctx, board, round, own.first(bytes), recv, count, dtype, op);
}

void shared_memory_broadcast(CollectiveContext& ctx, void* buffer, std::size_t count,
                             hm_dtype_t dtype, int root) {
  ctx.set_root(root);
  const std::size_t bytes = count * dtype_size(dtype);
  SharedBoard& board = board_for(ctx, bytes);
  const bool is_root = ctx.rank() == root;
  const auto [round, own] = publish(ctx, board, buffer, is_root ? bytes : 0);
  // Every rank's (empty) publication is read too, not only the root's: see "Slot reuse" above.
  for (int rank = 0; rank < ctx.size(); ++rank) {
    if (rank == ctx.rank()) continue;
    const auto data = read_checked(ctx, board, rank, round, rank == root ? bytes : 0);
    if (rank == root) ctx.copy_from_host(buffer, data.data(), bytes);
  }
}

void shared_memory_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                          hm_dtype_t dtype, hm_op_t op, int root) {
  ctx.set_root(root);
  const std::size_t bytes = count * dtype_size(dtype);
  SharedBoard& board = board_for(ctx, bytes);
  const auto [round, own] = publish(ctx, board, send, bytes);
  if (ctx.rank() == root) {
    reduce_all(ctx, board, round, own.first(bytes), recv, count, dtype, op);
    return;
  }
  // The others read every publication too (see "Slot reuse" above); only the root reduces.
  for (int rank = 0; rank < ctx.size(); ++rank) {
    if (rank != ctx.rank()) read_checked(ctx, board, rank, round, bytes);
  }
}

void shared_memory_barrier(CollectiveContext& ctx) {
  SharedBoard& board = board_for(ctx, 0);
  const auto [round, own] = publish(ctx, board, nullptr, 0);
  for (int rank = 0; rank < ctx.size(); ++rank) {
    if (rank != ctx.rank()) read_checked(ctx, board, rank, round, 0);
  }
}

}  // namespace holmes
