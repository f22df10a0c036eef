// Tag matching shared by the transports that move bytes themselves (tcp, shm, verbs, ucx active
// messages): a receive posted before its message arrives is filled in place; fragments that
// arrive first are kept until their receive is posted. Sizes and operation signatures are
// checked on every match, so ranks that disagree get HM_ERR_MISMATCH, never a corrupted buffer.
//
// A message may arrive as several fragments in any order (tcp spreads them over sockets); each
// names its offset in the whole. Not thread-safe: a transport calls it from its progress thread.
//
// A receive posted with a combine (transports/combine.hpp) does not take the bytes as they are:
// its buffer ends as reduce(in, message). A fragment handed over in memory (deliver(): the shm
// ring) is reduced from there straight into the buffer when it holds whole elements at a whole
// element's offset. A fragment a transport writes itself through land() goes to a staging piece
// of the fragment's size (a reused spare, still in the cache for the next one) and is reduced
// from there once landed() says it is in; a piece kept as unexpected data is reduced from that
// piece when its receive is posted. A fragment that splits an element is copied into a bounce
// buffer of the receive's own and reduced when the message is complete (the elements it splits
// are then all there). The buffer itself only ever receives reduced values, so `in` may be the
// buffer.
//
// Collective tags (kind bits 10) carry their operation's slot in their top bits (kind | sequence
// | step, see common/tag_codec.hpp), and every message of one operation carries the same
// signature on every rank that agrees on the call. So a message whose signature differs from
// this rank's in the same slot, whatever its step and sender, proves a disagreement: ranks that
// called different collectives in one slot exchange messages whose steps never meet, and would
// otherwise wait for the timeout. The slot fails at once: its posted receives, and any posted
// later. Point-to-point tags are not checked this way (their signatures differ by design).
//
// Control messages (kind bits 11, empty) let ranks whose disagreement leaves everyone waiting
// (roots that differ so that nobody sends) find out without a timeout; the matcher consumes them
// and never hands them to a receive:
//  - a probe: "I have waited a while for you in this slot, and this is my call". A collective
//    sends one to the peer it waits on after a short grace (collectives/context.cpp). If this
//    rank's call in that slot differs, the slot fails here, now or when this rank reaches it.
//  - a verdict: "I found that the ranks disagree in this slot and leave it". The rank that
//    found a disagreement sends one to every rank; the slot fails on each that is in it or has
//    yet to reach it, so the others end with HM_ERR_MISMATCH too rather than HM_ERR_PEER_FAILED
//    when the finder's connections close.
// Both carry the sender's signature and, for rooted collectives, its root (for the message).
// This rank learns its own call in a slot from the receives it posts there; a rank that only
// sends in a slot, or has received all it expects there, cannot answer a probe for it (that
// would need the transports to send a reply from their own thread).
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/byte_buffer.hpp"
#include "core/completion.hpp"
#include "transports/combine.hpp"
#include "transports/common/tag_codec.hpp"

namespace holmes {

// What a transport knows of an arriving fragment before its payload is read.
struct FragmentHeader {
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::uint64_t total = 0;   // bytes of the whole message
  std::uint64_t offset = 0;  // where this fragment's payload goes in the message
  std::uint64_t length = 0;  // payload bytes of this fragment
};

// The control messages above travel with control tags (common/tag_codec.hpp): no payload; the
// signature field carries the sender's operation signature.

// How messages name a rooted call: " with root R"; "" for a call without one (root < 0).
std::string describe_root(int root);

class Matcher {
 public:
  // Names a peer in error messages, e.g. "rank 3 (tcp 10.0.0.3:4000)".
  using PeerNamer = std::function<std::string(int peer)>;
  explicit Matcher(PeerNamer namer) : namer_(std::move(namer)) {}

  // Told of every point-to-point message (tag kind 01) that starts to arrive before its receive
  // is posted: once when land() or deliver() first keeps a fragment of it, and on each
  // note_arrival() (receives from any source take messages in this order: arrival_order.hpp).
  // Called on the caller's thread, inside land(), deliver() or note_arrival(): it must not call
  // back into the matcher. Set before any fragment arrives.
  using ArrivalListener = std::function<void(int peer, std::uint64_t tag)>;
  void set_arrival_listener(ArrivalListener listener) { arrival_listener_ = std::move(listener); }

  // Where an arriving fragment's payload must be written.
  struct Landing {
    std::byte* target = nullptr;        // nullptr with no piece: read and discard the payload
    std::shared_ptr<ByteBuffer> piece;  // set when kept as unexpected data
    CompletionPtr request;              // the posted receive it fills, if any
    // For a receive that combines: the staging piece `target` points to (the fragment alone),
    // kept alive while the transport writes there; landed() reduces from it.
    std::shared_ptr<ByteBuffer> staging;
  };

  // Phase 1, when a fragment header arrives. A fragment that contradicts earlier fragments of
  // the same message, or a malformed control message, returns nullopt: the peer broke the
  // protocol, the caller drops it.
  std::optional<Landing> land(int peer, const FragmentHeader& header);
  // Phase 2, once `header.length` payload bytes are at landing.target.
  void landed(int peer, const FragmentHeader& header, const Landing& landing);
  // Both phases for a payload already in memory (shm rings, verbs buffers). False on a protocol
  // error, as land().
  bool deliver(int peer, const FragmentHeader& header, std::span<const std::byte> payload);

  // A message of `tag` from `peer` is here but stays with the transport until its receive is
  // posted (shm leaves it in the ring): checked against this rank's operation in its slot, as
  // land() does, and a control message takes effect now (it may be delivered again later:
  // control messages are idempotent).
  void note_arrival(int peer, std::uint64_t tag, std::uint32_t signature);

  // Posts a receive. Returns true when it is already finished (its message was here, or did not
  // match), false when it now waits for its message. With `combine` the buffer ends as
  // reduce(combine.in, message) instead of the message; its size must be whole elements.
  bool post(int peer, std::uint64_t tag, std::uint32_t signature, std::span<std::byte> buffer,
            const CompletionPtr& request,
            const std::optional<ReceiveCombine>& combine = std::nullopt);

  // Fails the receives posted for `peer` (and drops its partial unexpected messages).
  void fail_peer(int peer, hm_status_t status, const std::string& message);
  // Fails one posted receive, if it is still waiting.
  void fail_posted(int peer, std::uint64_t tag, hm_status_t status, const std::string& message);
  // Fails everything posted and drops everything kept.
  void fail_all(hm_status_t status, const std::string& message);

  // Bytes held in unexpected messages (for limits and tests).
  std::size_t unexpected_bytes() const { return unexpected_bytes_; }

  // Whether a receive failed because a peer's verdict said the ranks disagree (so the failing
  // rank need not tell everyone again): true for the messages those receives fail with.
  static bool failed_by_verdict(std::string_view message);

 private:
  struct Key {
    int peer;
    std::uint64_t tag;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<std::uint64_t>()(k.tag * 0x9e3779b97f4a7c15ull ^
                                        static_cast<std::uint64_t>(static_cast<unsigned>(k.peer)));
    }
  };
  struct Posted {
    CompletionPtr request;
    std::byte* data = nullptr;
    std::size_t size = 0;
    std::uint32_t signature = 0;
    std::size_t received = 0;
    std::optional<ReceiveCombine> combine;
    // A combining receive's bytes that could not be reduced as they came: the bounce buffer
    // (message-sized, made on first need) and the [offset, length) ranges in it still to reduce.
    std::shared_ptr<ByteBuffer> bounce;
    std::vector<std::pair<std::size_t, std::size_t>> pending;
  };
  // A buffer for an unexpected piece of `length` bytes: a spare one when one is large enough.
  std::shared_ptr<ByteBuffer> take_piece(std::size_t length);
  // Keeps `piece` as a spare if nothing else holds it and the spares stay within bounds.
  void recycle(std::shared_ptr<ByteBuffer> piece);

  struct Unexpected {
    std::uint64_t total = 0;
    std::uint32_t signature = 0;
    std::size_t received = 0;
    std::vector<std::pair<std::uint64_t, std::shared_ptr<ByteBuffer>>> pieces;
  };
  // What a peer showed of its call in some slot: a data message, a probe or a verdict.
  struct Evidence {
    int peer = -1;
    std::uint32_t signature = 0;
    std::optional<ControlType> control;  // nullopt: a data message
    int root = -1;
  };

  std::string mismatch(int peer, std::uint64_t their_total, std::uint32_t their_signature,
                       std::size_t our_size, std::uint32_t our_signature) const;
  // Why this rank's call in a slot cannot go on, given a peer's evidence; nullopt if it can.
  std::optional<std::string> disagreement(const Evidence& evidence,
                                          std::uint32_t our_signature) const;
  // A peer's evidence about `slot`: judged now if it is this rank's current slot, kept if this
  // rank has yet to reach it, dropped if this rank is past it.
  void consider(std::uint32_t slot, const Evidence& evidence);
  // Handles a control message; false if it is malformed.
  bool on_control(int peer, std::uint64_t tag, std::uint32_t signature);
  // This rank posts its first receive in `slot`: judges what peers showed of it beforehand.
  void enter(std::uint32_t slot, std::uint32_t signature);
  // Fails the current slot: its posted receives now, and the ones posted later.
  void fail_current(const std::string& message);
  void account(const Key& key, const CompletionPtr& request, std::size_t bytes);
  // land() for a payload that is (stage == false) or will be (true) somewhere the matcher can
  // read it: only the first kind is combined straight from where it is.
  std::optional<Landing> land_fragment(int peer, const FragmentHeader& header, bool stage);
  // A combining receive's bytes at `offset` of its message: reduced into the buffer now when
  // they are whole elements, else kept in the bounce buffer (`bytes` may already be there).
  static void combine_in(Posted& r, std::size_t offset, std::span<const std::byte> bytes);
  // Once a combining receive has all its bytes: reduces what waits in the bounce buffer.
  static void finish_combine(Posted& r);

  PeerNamer namer_;
  ArrivalListener arrival_listener_;
  std::unordered_map<Key, Posted, KeyHash> posted_;
  std::unordered_map<Key, Unexpected, KeyHash> unexpected_;
  std::size_t unexpected_bytes_ = 0;
  // Buffers of unexpected pieces whose bytes went to their receive, kept for the next pieces: a
  // ring step's chunks that arrive before their receives would otherwise each cost an allocation
  // and, above malloc's mmap threshold, a page fault per 4 KiB.
  std::vector<std::shared_ptr<ByteBuffer>> spare_;
  std::size_t spare_bytes_ = 0;
  // Staging pieces of combining receives that have landed, while their transport may still hold
  // them: offered to recycle() at the next take_piece().
  std::vector<std::shared_ptr<ByteBuffer>> retired_;

  // This rank's latest collective operation with a posted receive, and why it failed, if it did.
  struct Current {
    std::uint32_t slot = 0;
    std::uint32_t signature = 0;
    std::optional<std::string> failure;
  };
  std::optional<Current> current_;
  // Evidence about slots this rank has yet to reach: a few distinct items per slot, for a
  // bounded number of slots (peers run ahead by a few operations at most; the bound only keeps
  // a hostile peer from growing it).
  std::unordered_map<std::uint32_t, std::vector<Evidence>> ahead_;
};

}  // namespace holmes
