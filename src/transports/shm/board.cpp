#include "transports/shm/transport.hpp"

#include <algorithm>
#include <thread>

#include "core/status.hpp"

namespace holmes::shm {

using namespace std::chrono_literals;

std::span<std::byte> ShmTransport::own_slot(std::uint64_t round) {
  return {board_data(own_.base(), round), kBoardSlotBytes};
}

void ShmTransport::publish(std::uint64_t round, std::uint64_t sequence, std::uint32_t signature,
                           int root, std::size_t bytes) {
  require(bytes <= kBoardSlotBytes, "shm: {} bytes do not fit a board slot of {}", bytes,
          kBoardSlotBytes);
  BoardSlotHeader& slot = board_slot(own_.base(), round);
  slot.sequence = sequence;
  slot.signature = signature;
  slot.root = root;
  slot.bytes = static_cast<std::uint32_t>(bytes);
  store_release(slot.round, round);
  publish_word(slot.round_word, static_cast<std::uint32_t>(round), slot.waiters);
}

PeerSegment* ShmTransport::board_peer(int peer) {
  PeerSegment* segment =
      board_peers_[static_cast<std::size_t>(peer)].load(std::memory_order_acquire);
  // Communicators above the eager-connect size attach on first use: ask once for all of them.
  if (segment == nullptr && !board_attach_asked_.exchange(true)) connect_all();
  return segment;
}

std::optional<BoardEntry> ShmTransport::read(int peer, std::uint64_t round) {
  require(peer >= 0 && peer < directory_.size() && peer != directory_.rank(),
          "shm: no board of rank {} to read", peer);
  if (load_acquire(own_.header().closed) != 0) {
    std::lock_guard lock(mutex_);
    throw Error(final_status_, final_why_);
  }
  // What the peer published is read even after it failed or closed, as its ring messages are.
  PeerSegment* segment = board_peer(peer);
  if (segment != nullptr) {
    BoardSlotHeader& slot = board_slot(segment->base(), round);
    const std::uint64_t published = load_acquire(slot.round);
    if (published == round) {
      BoardEntry entry;
      entry.sequence = slot.sequence;
      entry.signature = slot.signature;
      entry.root = slot.root;
      const std::uint32_t bytes = slot.bytes;
      if (bytes > kBoardSlotBytes) {
        fail(HM_ERR_TRANSPORT, "{} published {} bytes in a board slot of {}", peer_name(peer),
             bytes, kBoardSlotBytes);
      }
      entry.data = {board_data(segment->base(), round), bytes};
      return entry;
    }
    if (published > round) {
      fail(HM_ERR_MISMATCH,
           "{} published board round {} while this rank waits for round {}: the ranks ran "
           "different algorithms for an earlier call",
           peer_name(peer), published, round);
    }
  }
  if (board_failed_[static_cast<std::size_t>(peer)].load(std::memory_order_acquire)) {
    std::lock_guard lock(board_mutex_);
    const auto& [status, message] = board_failures_[static_cast<std::size_t>(peer)];
    throw Error(status, message);
  }
  if (segment != nullptr && load_acquire(segment->header().closed) != 0) {
    const auto [status, message] = close_reason(segment->header(), peer_name(peer));
    throw Error(status, message);
  }
  return std::nullopt;
}

void ShmTransport::sleep_until_published(int peer, std::uint64_t round,
                                         std::chrono::microseconds timeout) {
  PeerSegment* segment = board_peer(peer);
  if (segment == nullptr) {
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(timeout, 100us));
    return;
  }
  BoardSlotHeader& slot = board_slot(segment->base(), round);
  wait_for_word(slot.round_word, static_cast<std::uint32_t>(round), slot.waiters, timeout);
}

}  // namespace holmes::shm
