// Tag matching shared by the transports that move bytes themselves (tcp, shm, verbs, ucx active
// messages): a receive posted before its message arrives is filled in place; fragments that
// arrive first are kept until their receive is posted. Sizes and operation signatures are
// checked on every match, so ranks that disagree get HM_ERR_MISMATCH, never a corrupted buffer.
//
// A message may arrive as several fragments in any order (tcp spreads them over sockets); each
// names its offset in the whole. Not thread-safe: a transport calls it from its progress thread.
//
// Collective tags (kind bits 10) carry their operation in their top bits (kind | sequence | step,
// see collectives/context.hpp), and every message of one operation between two ranks carries the
// same signature. So a message whose signature differs from a receive posted for the same
// operation, though for another step, is a disagreement too: ranks that called different
// collectives in one slot exchange messages whose steps never meet, and would otherwise wait for
// the timeout. Point-to-point tags are not checked this way (their signatures differ by design).
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/completion.hpp"

namespace holmes {

// What a transport knows of an arriving fragment before its payload is read.
struct FragmentHeader {
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::uint64_t total = 0;   // bytes of the whole message
  std::uint64_t offset = 0;  // where this fragment's payload goes in the message
  std::uint64_t length = 0;  // payload bytes of this fragment
};

class Matcher {
 public:
  // Names a peer in error messages, e.g. "rank 3 (tcp 10.0.0.3:4000)".
  using PeerNamer = std::function<std::string(int peer)>;
  explicit Matcher(PeerNamer namer) : namer_(std::move(namer)) {}

  // Where an arriving fragment's payload must be written.
  struct Landing {
    std::byte* target = nullptr;  // nullptr with no piece: read and discard the payload
    std::shared_ptr<std::vector<std::byte>> piece;  // set when kept as unexpected data
    CompletionPtr request;                          // the posted receive it fills, if any
  };

  // Phase 1, when a fragment header arrives. A fragment that contradicts earlier fragments of
  // the same message returns nullopt: the peer broke the protocol, the caller drops it.
  std::optional<Landing> land(int peer, const FragmentHeader& header);
  // Phase 2, once `header.length` payload bytes are at landing.target.
  void landed(int peer, const FragmentHeader& header, const Landing& landing);
  // Both phases for a payload already in memory (shm rings, verbs buffers). False on a protocol
  // error, as land().
  bool deliver(int peer, const FragmentHeader& header, std::span<const std::byte> payload);

  // A message of `tag` from `peer` is here but stays with the transport until its receive is
  // posted (shm leaves it in the ring): checked against the receives posted for the same
  // operation, as land() does.
  void note_arrival(int peer, std::uint64_t tag, std::uint32_t signature);

  // Posts a receive. Returns true when it is already finished (its message was here, or did not
  // match), false when it now waits for its message.
  bool post(int peer, std::uint64_t tag, std::uint32_t signature, std::span<std::byte> buffer,
            const CompletionPtr& request);

  // Fails the receives posted for `peer` (and drops its partial unexpected messages).
  void fail_peer(int peer, hm_status_t status, const std::string& message);
  // Fails one posted receive, if it is still waiting.
  void fail_posted(int peer, std::uint64_t tag, hm_status_t status, const std::string& message);
  // Fails everything posted and drops everything kept.
  void fail_all(hm_status_t status, const std::string& message);

  // Bytes held in unexpected messages (for limits and tests).
  std::size_t unexpected_bytes() const { return unexpected_bytes_; }

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
  };
  struct Unexpected {
    std::uint64_t total = 0;
    std::uint32_t signature = 0;
    std::size_t received = 0;
    std::vector<std::pair<std::uint64_t, std::shared_ptr<std::vector<std::byte>>>> pieces;
  };

  std::string mismatch(int peer, std::uint64_t their_total, std::uint32_t their_signature,
                       std::size_t our_size, std::uint32_t our_signature) const;
  // The operation a collective tag belongs to; nullopt for other tags.
  static std::optional<std::uint64_t> operation_of(std::uint64_t tag);
  // Fails the receives posted for `peer` in `operation` whose signature is not `signature`.
  void fail_other_operation(int peer, std::uint64_t operation, std::uint32_t signature);
  void account(const Key& key, const CompletionPtr& request, std::size_t bytes);

  PeerNamer namer_;
  std::unordered_map<Key, Posted, KeyHash> posted_;
  std::unordered_map<Key, Unexpected, KeyHash> unexpected_;
  // Per peer, the operation and signature of the latest receive posted and message arrived.
  struct Operation {
    std::uint64_t id = 0;
    std::uint32_t signature = 0;
  };
  std::unordered_map<int, Operation> posted_operation_;
  std::unordered_map<int, Operation> arrived_operation_;
  std::size_t unexpected_bytes_ = 0;
};

}  // namespace holmes
