// What a collective algorithm sees of its communicator: its rank and size, and tagged sends and
// receives to peers. The context makes every tag unique (kind | operation sequence | step) and
// stamps every message with the operation's signature, so ranks that disagree about the call
// get HM_ERR_MISMATCH instead of corrupted buffers. Every wait is bounded by the timeout.
//
// Disagreements where no message of the other call ever arrives (roots that differ so that
// every rank waits to receive) are found by probing (transports/matcher.hpp): a receive that
// has waited kProbeAfter sends the peer it waits on this rank's signature, and that peer's
// matcher fails its own call in the slot if it differs. A rank that finds a disagreement tells
// every rank (a verdict) before it leaves, so that all end with HM_ERR_MISMATCH.
#pragma once

#include <holmes/holmes.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/byte_buffer.hpp"
#include "core/completion.hpp"
#include "core/cuda/device_ops.hpp"
#include "transports/common/tag_codec.hpp"
#include "transports/router.hpp"

namespace holmes {

enum class CollectiveKind : std::uint8_t {
  kAllreduce = 1,
  kReduceScatter = 2,
  kAllgather = 3,
  kBroadcast = 4,
  kReduce = 5,
  kAlltoall = 6,
  kBarrier = 7,
  kSplit = 8,      // the allgather inside hm_comm_split
  kLinkProbe = 9,  // the init probe of the links (link_probe.hpp), HOLMES_COST_PROBE=1
};

const char* collective_name(CollectiveKind kind);

// Hash of everything the ranks must agree on for one call.
std::uint32_t collective_signature(CollectiveKind kind, std::size_t count, int dtype, int op,
                                   int root);

// Message tags (collective_tag, p2p_tag) are laid out in transports/common/tag_codec.hpp.

// A receive staged through a pinned slot because its destination is device memory: wait()
// copies it in once it has arrived.
struct StagedReceive {
  std::shared_ptr<std::byte> slot;
  std::byte* device_target = nullptr;
  std::size_t bytes = 0;
  bool copied = false;
};

// One send or receive in flight, remembered for the error message if it fails.
struct Transfer {
  CompletionPtr request;
  int peer = -1;
  bool receive = false;
  std::shared_ptr<StagedReceive> staged;
};

// Temporary memory a communicator keeps for its collectives (they run one at a time): host
// bytes, or device bytes when the buffers are on a device.
struct ScratchArea {
  ByteBuffer host;  // not zeroed when it grows: every user writes before it reads
  std::shared_ptr<std::byte> device;
  std::size_t device_bytes = 0;
};
struct ScratchSpace {
  ScratchArea slots;  // an algorithm's own temporaries (receive slots, partial sums)
  ScratchArea phase;  // what one phase of a hierarchical algorithm hands to the next
  // One per segment of a hierarchical collective (segments.hpp), whose segments run at once:
  // kept from call to call like the rest, so that no call faults fresh pages in.
  std::vector<ScratchSpace> segments;
};

class DeviceMemory;
class StagingPool;

class GroupEngine;
class GroupEngines;
enum class GroupLevel;

// What a communicator lends a collective; all optional.
struct CollectiveResources {
  ScratchSpace* scratch = nullptr;                 // reused scratch (else per call)
  std::atomic<std::uint64_t>* progress = nullptr;  // bumped on every completed transfer
  DeviceMemory* device = nullptr;                  // set when the buffers are device memory
  StagingPool* staging = nullptr;  // pinned slots for device transfers (required with device)
  // The calling thread drives the transports (CallerDrive::begin_caller_drive, a small call):
  // what CollectiveContext::pause_drive hands back (DriveScope).
  CallerDrive* driven = nullptr;
  // Picks the engine of the groups of hierarchical collectives (nullptr: Holmes's ring).
  GroupEngines* engines = nullptr;
};

// A calling thread's caller drive for a scope: taken up (`drives`) for a small call that polls
// all along, or handed back (not `drives`) while a driving thread blocks without polling
// (waiting for threads of its own), and the other way round when the scope ends. While a caller
// drives, peers skip waking this rank's transport threads, so a driver that stops polling
// stalls every message to this rank until those threads wake by themselves (shm: up to 100 ms
// and more per message). Nothing when `transport` is null.
class DriveScope {
 public:
  DriveScope(CallerDrive* transport, bool drives) : transport_(transport), drives_(drives) {
    toggle(drives_);
  }
  ~DriveScope() { toggle(!drives_); }
  DriveScope(const DriveScope&) = delete;
  DriveScope& operator=(const DriveScope&) = delete;
  CallerDrive* transport() const { return transport_; }

 private:
  void toggle(bool begin) {
    if (transport_ == nullptr) return;
    if (begin) {
      transport_->begin_caller_drive();
    } else {
      transport_->end_caller_drive();
    }
  }
  CallerDrive* transport_;
  bool drives_;
};

// Names a call in error messages: "allreduce #12 (ring) on rank 3". Kept as its parts and
// formatted only when a message needs it: for a small collective, formatting the name costs a
// noticeable part of the whole call.
struct OperationName {
  const char* collective = "collective";
  std::uint64_t sequence = 0;
  const char* algorithm = "";
  int rank = 0;
  std::string str() const;
};

class CollectiveContext {
 public:
  CollectiveContext(Router& router, int rank, int size, std::uint64_t sequence,
                    std::uint32_t signature, std::chrono::milliseconds timeout,
                    std::size_t chunk_bytes, OperationName what,
                    CollectiveResources resources = CollectiveResources());

  // This rank's position and the number of positions: communicator ranks, or positions in a
  // view's member list.
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  // How long any one wait of this operation may block.
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Bumped on every completed transfer of the communicator's collectives (nullptr: none kept).
  const std::atomic<std::uint64_t>* progress() const { return resources_.progress; }
  // The operation's number and signature (every rank of the call has the same), and its name.
  std::uint64_t sequence() const { return sequence_; }
  std::uint32_t signature() const { return signature_; }
  const OperationName& name() const { return what_; }
  // For a caller about to block without polling: hands its drive back for the scope (nothing
  // when it does not drive).
  [[nodiscard]] DriveScope pause_drive() const { return DriveScope(resources_.driven, false); }
  // For a long call whose thread drives (the link probe): drives again from here on. A wait that
  // slept has handed the transports back to their threads for the rest of the call, and every
  // message would then cost those threads' wake-ups. Ends the drive and begins it again (a drive
  // does not nest); the call's own scope ends it. Nothing when the thread does not drive.
  void renew_drive() const;
  // Memory every rank of the communicator can read, when its transport has it (nullptr else).
  SharedBoard* shared_board() { return router_.shared_board(); }

  // The same operation seen by a subset or a reordering of the ranks, for algorithms built from
  // phases (a ring over islands, then over lanes): rank(), size() and every peer argument are
  // positions in `members` (positions of this context), which must contain this rank. Each
  // phase gets its own number so that the phases' steps never share a tag. The view borrows
  // this context's scratch and must not outlive it.
  CollectiveContext view(std::vector<int> members, std::uint64_t phase) const;
  // The same, with its own scratch: for phases that run at the same time on other threads.
  CollectiveContext view(std::vector<int> members, std::uint64_t phase,
                         ScratchSpace& scratch) const;
  // The same positions with every step moved up by `offset` (below a phase's 2^32 steps): for
  // calls that run one after the other inside one phase and may each use steps from 0, such as
  // a blockwise engine's chain per block, so that no two of them share a tag.
  CollectiveContext shifted(std::uint64_t offset) const;
  // The communicator rank at `position` of this context.
  int member(int position) const {
    return members_.empty() ? position : members_[static_cast<std::size_t>(position)];
  }

  // The root of a rooted collective, as a position of this context: named in error messages
  // and in probes, so that ranks that disagree on it are told both roots.
  void set_root(int position) { root_ = member(position); }
  // The root's communicator rank; -1 for a collective without one.
  int root() const { return root_; }

  // Scratch memory for this operation, of the buffers' kind (host or device): reused across the
  // communicator's calls (they never run concurrently), so small collectives do not pay for
  // allocating and touching fresh pages.
  std::byte* scratch(std::size_t bytes);
  // A second area, for results that one phase of an algorithm hands to the next while the
  // next phase uses scratch().
  std::byte* phase_buffer(std::size_t bytes);
  // Scratch spaces for `segments` segments that run at the same time (at least that many),
  // reused across the communicator's calls as scratch() is.
  std::span<ScratchSpace> segment_scratch(std::size_t segments) const;

  // Operations on the caller's buffers and scratch, wherever they live.
  bool on_device() const { return resources_.device != nullptr; }
  // The device the buffers are on (HM_ERR_INTERNAL when they are not).
  DeviceMemory& device_memory() const;
  // The engine for this view's group, a host's or an island's ranks (engine/group_engine.hpp).
  GroupEngine& group_engine(GroupLevel level) const;
  void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
              std::size_t count);
  void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks);
  // dst = inputs[0] op inputs[1] op ... in that order (DeviceMemory::reduce_many: on a device,
  // one pass over every input); dst may be inputs[0] only.
  void reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst, std::span<const void* const> inputs,
                   std::size_t count);
  // Copies between buffers that are the same or do not overlap (host: any overlap).
  void copy(void* dst, const void* src, std::size_t bytes);
  // Several such copies, whose destinations do not overlap: on a device, one wait for all.
  void copy_many(std::span<const DeviceCopy> copies);
  // Copies between the caller's buffers (or scratch) and host memory that is not theirs.
  void copy_to_host(void* host, const void* src, std::size_t bytes);
  void copy_from_host(void* dst, const void* host, std::size_t bytes);

  Transfer send(int peer, std::uint64_t step, std::span<const std::byte> data);
  Transfer recv(int peer, std::uint64_t step, std::span<std::byte> data);
  // A receive that leaves reduce(dtype, op, dst, in, received) in `dst` once it completes
  // (Router::irecv_reduce), with the operands in the order the algorithms use when they
  // reduce themselves, so the result is bitwise the same. nullopt when the link cannot combine
  // (or the buffers are device memory): receive with recv() and reduce() after the wait.
  std::optional<Transfer> recv_reduce(int peer, std::uint64_t step, std::span<std::byte> dst,
                                      const std::byte* in, hm_dtype_t dtype, hm_op_t op);

  // Block until the transfer completes (and, for a staged receive, its data is in place);
  // throws holmes::Error naming the operation, the peer and the link on failure or after the
  // timeout. Each receive is waited for once. A receive still waiting after kProbeAfter probes
  // its peer (once per peer and context).
  void wait(const Transfer& transfer);
  void wait_all(const std::vector<Transfer>& transfers);
  // Gives up a receive that has not completed (Router::cancel_receive): its request ends
  // with HM_ERR_ABORTED and nobody waits for it.
  void cancel(const Transfer& transfer, std::uint64_t step);

  // Sends `peer` (a position) this rank's call in a probe, unless done before: the peer's
  // matcher fails its own call in this slot if it differs (matcher.hpp). Receives do it by
  // themselves after kProbeAfter; collectives that wait otherwise (the shared board) call it.
  void probe_position(int position) { probe(member(position)); }

  // How long a receive waits before it probes its peer: far above a message's time on any
  // link of a healthy call, so a probe follows only a late peer (one empty message, which the
  // peer's matcher drops when the calls agree) or a disagreement; far below the timeout, so a
  // disagreement that leaves every rank waiting ends in a fraction of a second.
  static constexpr std::chrono::milliseconds kProbeAfter{150};
  // Bounds what a rank that leaves an operation for a disagreement spends on the others: the
  // sends of its verdicts (if it found the disagreement), then a pause that lets the peers'
  // transports read the verdicts before this rank's connections close (a closed peer would
  // otherwise be reported as HM_ERR_PEER_FAILED by ranks that have not read one yet).
  static constexpr std::chrono::milliseconds kVerdictSendBound{100};
  static constexpr std::chrono::milliseconds kVerdictLinger{50};

 private:
  CollectiveContext(const CollectiveContext& parent, std::vector<int> members,
                    std::uint64_t step_base);
  std::uint64_t full_step(std::uint64_t step) const { return step_base_ + step; }
  std::byte* area(ScratchArea& area, std::size_t bytes);
  // Sends `peer` (a communicator rank) this rank's call in a probe, unless done before.
  void probe(int peer);
  // This rank leaves the operation for a disagreement (described by `message`): tells every
  // rank, unless a peer's verdict is what stopped it, then gives the verdicts time to land.
  void tell_disagreement(const std::string& message);
  // Throws the failure of `transfer`.
  [[noreturn]] void fail_transfer(const Transfer& transfer);

  Router& router_;
  int rank_;
  int size_;
  std::uint64_t sequence_;
  std::uint32_t signature_;
  std::chrono::milliseconds timeout_;
  std::size_t chunk_bytes_;
  OperationName what_;
  CollectiveResources resources_;
  ScratchSpace own_scratch_;  // when the communicator lends none
  std::vector<int> members_;  // communicator rank of each position; empty: the identity
  std::uint64_t step_base_ = 0;
  int world_size_;  // ranks of the communicator (views: of the whole, not theirs)
  int root_ = -1;   // communicator rank of the root; -1: not a rooted collective
  std::chrono::milliseconds probe_after_;
  std::vector<int> probed_;  // peers this context has probed
};

}  // namespace holmes
