// Which point-to-point message each receive takes. The sender numbers its messages to one peer
// per tag (p2p_tag: the caller's tag and a sequence number, common/tag_codec.hpp), and the
// receiver gives every receive the number of the message it takes:
//  - a receive from a named peer takes that peer's next message with its tag that no receive
//    has taken yet (claim()): the n-th such receive meets the n-th send;
//  - a receive from any source (expect_any()) takes, of the messages with its tag that are each
//    peer's next one, the one that arrived first. The transports' matchers report every
//    point-to-point message whose first fragment arrives before its receive is posted
//    (arrived(), through Transport::set_arrival_listener), in the order they see them; a message
//    whose receive was posted first is, by then, taken. Any-source receives with one tag take
//    messages in the order they were posted.
// So the per-peer order of one tag holds whichever kind of receive takes a message, and a named
// receive never waits for a message an any-source receive took. A named receive posted while an
// any-source one waits takes the peer's next message that has not arrived yet: one that had
// arrived already went to the any-source receive.
//
// An any-source receive only learns its message here; its caller then posts the receive for it
// (peer and tag) on the peer's transport, which holds the message as unexpected data until then.
// Thread-safe: arrived() comes from the transports' threads (it never blocks), the rest from the
// communicator's callers.
#pragma once

#include <holmes/holmes.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/completion.hpp"

namespace holmes {

class ArrivalOrder {
 public:
  // An any-source receive's wait for its message. `matched` completes when it has one (peer and
  // tag are set before) or fails: a peer failed (any of them could have been the sender) or the
  // communicator closed.
  struct Ticket {
    std::uint32_t user_tag = 0;
    int peer = -1;
    std::uint64_t tag = 0;  // the point-to-point tag of the message it took
    Completion matched;
  };

  explicit ArrivalOrder(int size);

  // A transport saw the first fragment of point-to-point message `tag` from `peer` before its
  // receive was posted (other kinds of tag are ignored). Reports of a message already taken, and
  // repeated reports, change nothing.
  void arrived(int peer, std::uint64_t tag);
  // The sequence number of the message a receive from `peer` with `user_tag` takes.
  std::uint64_t claim(int peer, std::uint32_t user_tag);
  // A receive from any source with `user_tag`; its ticket may be matched at once.
  std::shared_ptr<Ticket> expect_any(std::uint32_t user_tag);
  // Withdraws a ticket that has no message yet (its request was dropped); false when it has one
  // (its caller then owes it a receive).
  bool cancel(const std::shared_ptr<Ticket>& ticket);

  // Any-source receives waiting now, and those posted later that find no message waiting, fail
  // with this peer's failure.
  void peer_failed(int peer, hm_status_t status, const std::string& message);
  // Every waiting and later any-source receive fails (the communicator shut down).
  void close(hm_status_t status, const std::string& why);

 private:
  // Key of an arrival: user tag, peer, sequence number (modulo 2^32, as the tag carries it).
  using Arrival = std::tuple<std::uint32_t, int, std::uint32_t>;

  std::uint64_t& next(int peer, std::uint32_t user_tag);
  // Gives waiting tickets of `user_tag` the earliest messages that are their peer's next.
  void match(std::uint32_t user_tag);
  // Fails every waiting ticket with the recorded failure, if there is one.
  void fail_waiting();

  std::mutex mutex_;
  // Next sequence number to take per peer: tag 0 (the common case) in a vector, others in a map.
  std::vector<std::uint64_t> next_untagged_;
  std::map<std::pair<int, std::uint32_t>, std::uint64_t> next_tagged_;
  // Messages that arrived before any receive took them, with the order they arrived in.
  std::map<Arrival, std::uint64_t> arrivals_;
  std::uint64_t arrival_count_ = 0;
  // Any-source receives that wait for a message, per user tag, in the order they were posted.
  std::map<std::uint32_t, std::deque<std::shared_ptr<Ticket>>> waiting_;
  // The first failure: every ticket that would wait fails with it.
  std::optional<std::pair<hm_status_t, std::string>> failure_;
};

}  // namespace holmes
