// Emulated links: holds the traffic to each peer to a rate and a one-way latency, so that ranks
// on one machine (loopback TCP, shared memory) behave like a cluster whose links are slower and
// farther apart (DESIGN.md, "Emulating a heterogeneous cluster on one machine"). No privileges
// are needed: the delay is added above the real transport, in this process.
//
// The model, per outgoing link (one per peer): a message of B bytes occupies the link for
// B / rate seconds, one message after another (a serial token bucket: a message starts when the
// link is free), and reaches the peer `latency` after its last byte left. Links may share one
// bucket (the NICs they all leave through: a rank's traffic to every peer of one link class),
// so that sending to several peers at once does not multiply the rate. The shaper hands the
// message to the real transport at that moment; the real transport's own time (loopback: far
// faster) comes on top. Messages to one peer keep their order. Receives are not shaped: the
// sender's shaping already holds every byte that crosses the link.
//
// One scheduler thread per shaper waits on a condition variable until the earliest message is
// due (never spinning; every wait bounded); it is started only when some link is shaped.
#pragma once

#include <holmes/holmes.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/completion.hpp"
#include "transports/transport.hpp"

namespace holmes {

// How one link is held: its rate and one-way latency, and where the numbers come from (for
// logs and link descriptions, e.g. "link class eth-25: 25 Gbit/s / scale 100 / 2 ranks").
struct LinkShape {
  double bytes_per_s = 0;  // > 0
  std::chrono::nanoseconds latency{0};
  std::string origin;
  // Links of one shaper with the same bucket (>= 0) share their serialization: one message at a
  // time over all of them. -1: the link has a bucket of its own.
  int bucket = -1;

  // "shaped to 0.125 Gbit/s + 30 us (link class eth-25: ...)"
  std::string describe() const;
};

class LinkShaper {
 public:
  // Hands a message to the real transport (called on the scheduler thread, in due order).
  using SendFunction = std::function<CompletionPtr(
      int peer, std::uint64_t tag, std::uint32_t signature, std::span<const std::byte> data)>;

  // `shapes[peer]`: that link's shape, or nullopt where traffic passes unshaped. Throws
  // HM_ERR_INVALID_ARGUMENT for a rate that is not positive and finite or a negative latency.
  LinkShaper(std::vector<std::optional<LinkShape>> shapes, SendFunction send);
  // Fails what is still pending (HM_ERR_ABORTED) and stops the scheduler thread.
  ~LinkShaper();
  LinkShaper(const LinkShaper&) = delete;
  LinkShaper& operator=(const LinkShaper&) = delete;

  // nullptr when the link to `peer` is not shaped (or `peer` is out of range).
  const LinkShape* shape(int peer) const;
  bool any_shaped() const;

  // Queues the message for its due time; the completion ends when the real transport's send
  // does, with its status. `peer` must be shaped. The buffer must stay valid until then.
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data);

  // Fails every message not yet handed over (and every later one) with `status`; their buffers
  // are never touched afterwards. kUntilReleased also stops the scheduler thread, so that nothing
  // is handed to the real transport after this returns.
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait);

  // Fails the messages to `peer` not yet handed over.
  void fail_peer(int peer, hm_status_t status, const std::string& message);

 private:
  struct Pending {
    int peer;
    std::uint64_t tag;
    std::uint32_t signature;
    std::span<const std::byte> data;
    CompletionPtr done;
  };
  // Due time, then arrival order: equal due times keep the order isend saw them in.
  using Key = std::pair<Clock::time_point, std::uint64_t>;

  void run();
  void hand_over(Pending& message);

  const std::vector<std::optional<LinkShape>> shapes_;
  const SendFunction send_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<Key, Pending> queue_;
  std::vector<std::size_t> bucket_of_;      // per peer: index into free_at_
  std::vector<Clock::time_point> free_at_;  // per bucket: when its last message is serialized
  std::uint64_t next_sequence_ = 0;
  bool stopped_ = false;
  hm_status_t stop_status_ = HM_SUCCESS;
  std::string stop_message_;
  std::thread scheduler_;  // last: started once everything above exists
};

}  // namespace holmes
