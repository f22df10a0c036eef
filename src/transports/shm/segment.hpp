// POSIX shared-memory segments: the one an endpoint owns (its rings, its doorbell) and the ones
// of its peers it maps to write into. Opening a peer's segment checks everything before trusting
// it: the name's shape, the file's owner and size, magic, layout version, communicator, layout
// arithmetic and the owner's proof of the job token. A stale or foreign segment is refused with
// an error that names it, never mapped blindly.
#pragma once

#include <holmes/holmes.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transports/common/job_token.hpp"
#include "transports/shm/layout.hpp"

namespace holmes::shm {

// An mmap'ed range, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t bytes) : base_(static_cast<std::byte*>(base)), bytes_(bytes) {}
  ~Mapping();
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* data() const { return base_; }
  std::size_t size() const { return bytes_; }

 private:
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// A file descriptor, closed on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Names are "/holmes-<context>-<pid>-<random>" with only [A-Za-z0-9._-] after the slash.
inline constexpr std::string_view kNamePrefix = "/holmes-";
bool is_segment_name(std::string_view name);

// FNV-1a of the communicator context, kept in the header so that a segment of another
// communicator is named as such instead of failing a proof.
std::uint64_t context_hash(std::string_view context);

// Identifies this process's pid namespace (kill() and process_vm_readv only make sense for a
// peer in the same one); 0 when it cannot be read.
std::uint64_t pid_namespace_id();

// What an endpoint proves with the job token (common/job_token.hpp), bound to the communicator,
// the segment and the ranks. Written into the segments; no connection carries them.
class Proofs {
 public:
  Proofs(std::string token, std::string context) : token_(std::move(token), std::move(context)) {}
  // The owner's proof, published with the layout.
  void owner_mac(const SegmentHeader& header, const std::string& name,
                 std::uint8_t (&out)[kMacBytes]) const;
  bool proves_owner(const SegmentHeader& header, const std::string& name) const;
  // A producer's proof, written into its ring slot when it attaches.
  void producer_mac(const SegmentHeader& header, const RingControl& control, int from, int to,
                    std::uint8_t (&out)[kMacBytes]) const;
  bool proves_producer(const SegmentHeader& header, const RingControl& control, int from,
                       int to) const;

 private:
  JobToken token_;
};

// Records why this endpoint closes in its segment header, for peers waiting on it.
void write_close_reason(SegmentHeader& header, hm_status_t status, const std::string& why);

// A peer's closing as this rank reports it: the status its waiters get (a disagreement stays a
// disagreement; anything else is the peer failing) and the message, with the peer's reason
// when it gave one that says more than a plain destroy. The bytes come from another process:
// copied once, cut at the buffer's end, non-printable characters replaced. `peer` names it.
std::pair<hm_status_t, std::string> close_reason(SegmentHeader& header, const std::string& peer);

// The segment this endpoint owns. Created with its header only; set_layout() grows it once the
// communicator size is known.
class OwnSegment {
 public:
  // Creates a fresh, uniquely named segment (mode 0600). Throws HM_ERR_TRANSPORT.
  explicit OwnSegment(const std::string& context);
  ~OwnSegment();  // unlinks the name if still there
  OwnSegment(const OwnSegment&) = delete;
  OwnSegment& operator=(const OwnSegment&) = delete;

  const std::string& name() const { return name_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(mapping_.data()); }

  // Sizes the segment for `ring_count` rings of `ring_bytes`, reserves the memory of the slots in
  // `reserve` (the peers this endpoint serves) and publishes the layout with the owner's proof.
  // Throws HM_ERR_OUT_OF_MEMORY when /dev/shm is full.
  void set_layout(int rank, std::uint32_t ring_count, std::uint64_t ring_bytes,
                  const std::vector<bool>& reserve, const Proofs& proofs);

  RingControl& control(int rank) const;
  std::byte* ring_data(int rank) const;
  std::uint64_t ring_bytes() const { return ring_bytes_; }
  std::byte* base() const { return mapping_.data(); }

  // Removes the name from /dev/shm (mappings stay valid); later calls do nothing.
  void unlink();
  bool linked() const { return linked_; }

 private:
  std::string name_;
  FileDescriptor fd_;
  Mapping mapping_;
  std::uint64_t ring_bytes_ = 0;
  bool linked_ = false;
};

// A peer's segment, mapped to write into this rank's ring in it and to ring its doorbell.
class PeerSegment {
 public:
  struct Expect {
    int owner_rank = -1;           // the peer
    std::uint32_t ring_count = 0;  // the communicator size
    std::uint64_t context_hash = 0;
  };

  // Opens and checks `name`. Returns nullptr while the owner has not published its layout yet
  // (retry later). Throws holmes::Error naming the segment and what is wrong with it:
  // HM_ERR_INVALID_ARGUMENT (not a segment name), HM_ERR_PEER_FAILED (no such segment),
  // HM_ERR_TRANSPORT (foreign, stale or malformed), HM_ERR_AUTH (no proof of the token).
  static std::unique_ptr<PeerSegment> open(const std::string& name, const Expect& expect,
                                           const Proofs& proofs);

  const std::string& name() const { return name_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(mapping_.data()); }
  RingControl& control(int rank) const;
  std::byte* ring_data(int rank) const;
  std::uint64_t ring_bytes() const { return ring_bytes_; }
  std::byte* base() const { return mapping_.data(); }
  pid_t owner_pid() const { return owner_pid_; }
  bool same_pid_namespace() const { return same_pid_namespace_; }

 private:
  PeerSegment(std::string name, Mapping mapping, std::uint64_t ring_bytes, pid_t owner_pid,
              bool same_pid_namespace)
      : name_(std::move(name)),
        mapping_(std::move(mapping)),
        ring_bytes_(ring_bytes),
        owner_pid_(owner_pid),
        same_pid_namespace_(same_pid_namespace) {}

  std::string name_;
  Mapping mapping_;
  std::uint64_t ring_bytes_;
  pid_t owner_pid_;
  bool same_pid_namespace_;
};

// The board slot of `round` in a mapped segment (own or a peer's, after set_layout or open), and
// its kBoardSlotBytes of data.
BoardSlotHeader& board_slot(std::byte* segment, std::uint64_t round);
std::byte* board_data(std::byte* segment, std::uint64_t round);

// Unlinks Holmes segments left in /dev/shm by processes of this user (and pid namespace) that
// died before their peers attached. Best effort; never touches a live owner's segment.
void remove_stale_segments();

}  // namespace holmes::shm
