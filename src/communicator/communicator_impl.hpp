// The communicator: a set of ranks, the transport that links them, and the bookkeeping that
// keeps every rank's messages apart (operation sequence numbers, per-peer point-to-point
// counters). It validates every call, picks the algorithm, runs it, and turns any failure into
// a recorded, named error: after a timeout, a dead peer or a mismatch the communicator is
// unusable (every later call returns that error) until destroyed.
#pragma once

#include <holmes/holmes.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "collectives/context.hpp"
#include "collectives/device_memory.hpp"
#include "collectives/link_probe.hpp"
#include "collectives/registry.hpp"
#include "collectives/staging.hpp"
#include "collectives/tuning.hpp"
#include "communicator/config.hpp"
#include "communicator/group_engines.hpp"
#include "communicator/op_queue.hpp"
#include "communicator/wiring.hpp"
#include "core/completion.hpp"
#include "topology/locality.hpp"
#include "transports/options.hpp"
#include "transports/router.hpp"

namespace holmes {
class Rendezvous;
}

namespace holmes::detail {

class CommunicatorImpl;

// A receive from any source (HM_ANY_SOURCE) until it knows its message (any_source.cpp): its
// ticket in the arrival order and what to post once the ticket names the message.
struct AnySourceReceive {
  std::shared_ptr<ArrivalOrder::Ticket> ticket;
  std::span<std::byte> into;  // the caller's buffer, or the pinned slot of a device buffer
  std::uint32_t signature = 0;
};

// A nonblocking operation as the API hands it out.
struct RequestImpl {
  // Dropping an any-source receive that has no message withdraws it; one that has a message
  // posts its receive, which runs to its end as every detached request does.
  ~RequestImpl();

  std::shared_ptr<CommunicatorImpl> comm;
  CompletionPtr request;    // nullptr while `any` waits for its message
  bool collective = false;  // runs on the op queue (else: a point-to-point transfer)
  int peer = -1;            // point-to-point only; an any-source receive's once it has a message
  bool receive = false;     // a point-to-point receive
  std::string what;         // e.g. "hm_isend to rank 3"
  // Runs once after the operation succeeded, before wait() returns (a staged device receive
  // copies its data in here).
  std::function<void()> finish;
  std::unique_ptr<AnySourceReceive> any;
};

using holmes::CollectiveCall;

// Bytes a single buffer may span. No process has more than 2^48 bytes of address space (x86-64
// and arm64 user space), so a larger count is a bug in the caller (often a negative number
// converted to size_t), refused before it could overflow pointer arithmetic or a memcpy.
constexpr std::size_t kMaxBufferBytes = std::size_t{1} << 48;

// Whether a call returns when its operation is over or at once with a request.
enum class CallMode { kBlocking, kNonblocking };
// Which end of a point-to-point message a call is.
enum class P2pDirection { kSend, kReceive };

class CommunicatorImpl : public std::enable_shared_from_this<CommunicatorImpl> {
 public:
  struct Params {
    int rank = 0;
    int size = 1;
    std::string context;  // unique name of this communicator within the job
    std::unique_ptr<Router> router;
    std::chrono::milliseconds timeout{kDefaultTimeoutMs};
    std::size_t chunk_bytes = kDefaultChunkBytes;
    TransportOptions transport_options;  // split communicators create theirs the same way
    std::optional<std::string> topology;
    WiringFacts facts;  // what the ranks agreed on at wiring
    // Tier numbers the parent communicator measured (HOLMES_COST_PROBE): a split inherits them
    // rather than probing again.
    TierCosts measured;
    // Tier numbers the topology file (and shaping) give (topology_tier_costs).
    TierCosts declared;
    // The settings it was configured with (a split's: its parent's).
    Settings settings;
    // The store the world met through, shared by every communicator made from it (shrink
    // meets through it); nullptr in tests that build a communicator by hand.
    std::shared_ptr<Rendezvous> store;
  };

  explicit CommunicatorImpl(Params params);
  ~CommunicatorImpl();

  // Collective over the job: rendezvous through the store, then a transport to every rank.
  static std::shared_ptr<CommunicatorImpl> create_world(const ResolvedConfig& config);
  // A process that joins the next grow of a communicator of the job (grow.cpp): it meets the
  // growing ranks through the store `config` names.
  static std::shared_ptr<CommunicatorImpl> join(const ResolvedConfig& config);
  // Collective over this communicator and `joining` processes that call join(): this one's
  // ranks in order, then the joiners (grow.cpp).
  std::shared_ptr<CommunicatorImpl> grow(int joining);
  // Collective over this communicator; nullptr for HM_COLOR_UNDEFINED.
  std::shared_ptr<CommunicatorImpl> split(int color, int key);
  // Collective over the ranks that remain (shrink.cpp): a communicator without `exclude` (and,
  // with HM_SHRINK_FAILED, without the ranks the survivors agree failed), in this one's rank
  // order. A rank left out gets HM_ERR_ABORTED.
  std::shared_ptr<CommunicatorImpl> shrink(std::span<const int> exclude, int flags);

  // The transport to `peer` and why it was chosen; its link, e.g. "tcp 10.0.0.2:4000 x2".
  Route peer_route(int peer) const;
  std::string peer_link(int peer) const;
  // What carries device buffers between this rank and `peer` (hm_comm_peer_engine).
  PeerEngine peer_engine(int peer) const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Where every rank sits (index = rank), as the ranks told each other at wiring; and the
  // topology file the job was started with. The planner reads both.
  const std::vector<Locality>& localities() const { return facts_.localities; }
  const std::optional<std::string>& topology_file() const { return topology_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Validates, then runs the collective now (after any queued nonblocking ones) when blocking,
  // or queues it and returns its request.
  std::shared_ptr<RequestImpl> collective(const CollectiveCall& call, CallMode mode);
  // Messages from one rank to another with the same tag (0 .. kMaxUserTag) arrive in order. A
  // receive from HM_ANY_SOURCE takes the first message with its tag to arrive from any peer
  // (transports/arrival_order.hpp).
  std::shared_ptr<RequestImpl> point_to_point(P2pDirection direction, const void* buffer,
                                              std::size_t count, hm_dtype_t dtype, int peer,
                                              CallMode mode, std::uint32_t tag = 0);

  // Throw holmes::Error when the operation failed or the wait timed out.
  void wait(RequestImpl& request);
  bool test(RequestImpl& request);
  // hm_wait_on_stream: the work enqueued on the caller's stream from now on waits until
  // `request` is over; returns at once. The stream waiter waits for the request (a receive's
  // copy-in included), sets `*source` (when given) to a receive's sender, records a failure as
  // the communicator's async error, and opens the request gate, also after a failure.
  void wait_on_stream(std::shared_ptr<RequestImpl> request, int* source);
  // An any-source receive: once its ticket has a message (waiting up to the timeout when
  // `block`), posts the receive of it and returns true; false when not blocking and it has none
  // yet. Throws holmes::Error when the ticket failed or the wait timed out (any_source.cpp).
  bool resolve_source(RequestImpl& request, bool block);
  // A dropped any-source receive (~RequestImpl): withdrawn, or its receive posted. Never throws.
  void abandon_source(RequestImpl& request) noexcept;

  void abort() noexcept;
  // abort(), telling every peer (Router::revoke): theirs is revoked as their notice arrives.
  void revoke() noexcept;
  // Closes every connection and stops the worker; in-flight operations end HM_ERR_ABORTED.
  void close() noexcept;
  hm_status_t async_error() const;

  // hm_comm_set_cuda_stream: from now on a blocking-form collective on device buffers is
  // ordered on `stream` (a cudaStream_t) and returns once enqueued (stream_order.cpp).
  // HM_ERR_UNSUPPORTED where this process has no usable device.
  void set_cuda_stream(void* stream);
  // hm_comm_clear_cuda_stream: such calls block again (the calls already enqueued still run).
  void clear_cuda_stream() noexcept;

  // Forces an algorithm for one collective (kAuto: back to the cost model); throws
  // HM_ERR_INVALID_ARGUMENT when the collective does not have it.
  void set_algorithm(CollectiveKind kind, Algorithm algorithm);
  // What a call would run with and the predicted time (bytes: the whole buffer).
  // The algorithm a call would run and its predicted time, by `model` (the communicator's when
  // nullptr; a call on device buffers passes CostModel::for_device_buffers).
  Prediction query_algorithm(CollectiveKind kind, std::size_t count, hm_dtype_t dtype,
                             const CostModel* model = nullptr) const;
  // The cost model's numbers for the link to `peer` (nominal, HOLMES_COST_*, or measured).
  LinkCost link_cost(int peer) const;
  // Every setting in effect and its source; the tiers the topology file gives numbers for, and
  // no setting does, show those numbers (source: topology file).
  std::string settings_dump() const;

 private:
  // How a derived communicator's ranks relate to this one's: all of them ranks of this one (a
  // split, a shrink), or some of them new (a grow).
  enum class Lineage { kSubset, kSuperset };

  // What a world's transports are configured with, from its config, listening where `store`
  // suggests unless the config names an address.
  static TransportOptions transport_options_for(const ResolvedConfig& config,
                                                const Rendezvous& store, std::string context);
  // The job's store as the config names it (a server, or the caller's own key-value store).
  static std::shared_ptr<Rendezvous> store_for(const ResolvedConfig& config,
                                               const Deadline& deadline);
  // The Params of a communicator made from a config (the world, a joiner's), but for what its
  // wiring yields (router, facts, tier numbers) and its store.
  static Params params_from(const ResolvedConfig& config, int rank, int size,
                            const TransportOptions& options);
  // Where this process sits, from the config's topology and overrides (logs how it found out).
  static LocalitySource locality_from(const ResolvedConfig& config, int rank);
  // Wires and builds a communicator derived from this one, in which this process is `new_rank`
  // of `new_size` and its old ranks sit where they sat here; the exchanges go through `gather`.
  std::shared_ptr<CommunicatorImpl> derive(int new_rank, int new_size, std::string context,
                                           const GatherStrings& gather, const Deadline& deadline,
                                           Lineage lineage);
  void validate(const CollectiveCall& call) const;
  // The device memory the call's buffers live in, or nullptr for host memory. Throws
  // HM_ERR_INVALID_ARGUMENT when one buffer is on a device and the other is not.
  DeviceMemory* device_of(const CollectiveCall& call) const;
  StagingPool& staging(DeviceMemory& device);
  // Every rank's string, through this communicator (two collectives).
  std::vector<std::string> allgather_strings(const std::string& mine);
  void execute(const CollectiveCall& call, std::uint64_t sequence, DeviceMemory* device);
  // Whether a call on device buffers goes to the group engine of the whole communicator.
  bool takes_group_engine(const CollectiveCall& call, const DeviceMemory* device) const;
  // A call ordered on the caller's stream: marks the stream, holds it at the gate, and queues the
  // call for the proxy (the op queue's worker), which runs it once the mark is reached and then
  // opens the gate, also when the call failed (the failure is the communicator's async error).
  void enqueue_on_stream(const CollectiveCall& call, std::uint64_t sequence, DeviceMemory& device);
  // The same for any work on device buffers (`what` names it in errors): a send or a receive.
  void enqueue_on_stream(DeviceMemory& device, std::string what, std::function<void()> work);
  // Whether a blocking call on `device` buffers (nullptr: host buffers) goes on the stream.
  bool ordered_on_stream(const DeviceMemory* device, CallMode mode) const {
    return mode == CallMode::kBlocking && device != nullptr && cuda_stream_.has_value();
  }
  // Holds `stream` at `gate` (at its next ticket of `tickets`) until `worker` has run `work`; the
  // worker opens the gate after it, also when it failed (the failure becomes the communicator's
  // async error). What enqueue_on_stream and wait_on_stream share.
  void hold_stream_for(void* stream, DeviceMemory::StreamGate& gate, std::uint32_t& tickets,
                       OpQueue& worker, std::function<void()> work);
  // Sleeps until `point` is reached; throws when the communicator fails or the timeout passes.
  void wait_for_stream(DeviceMemory::StreamPoint& point, const char* what) const;
  // The job's store under this communicator's prefix, for the group engines' agreements.
  EngineStore engine_store() const;
  // The hierarchy from the wiring's facts and the cost numbers (measured_ where it has them).
  Hierarchy make_hierarchy() const;
  // The numbers of each tier of links, from the setting, probe, topology file or defaults.
  struct TierLinks {
    std::array<LinkCost, kTiers> links;
    const LinkCost& operator[](Tier tier) const { return links[static_cast<std::size_t>(tier)]; }
  };
  TierLinks tier_links() const;
  // The init probe (HOLMES_COST_PROBE=1, link_probe.hpp): measures the tiers, then rebuilds the
  // hierarchy with the numbers. Collective; before the communicator is handed out.
  void calibrate();
  // Takes measured_ into the cost model (the reduction speed) and the hierarchy.
  void adopt_measurements();
  void check_usable() const;
  // Records the first failure and closes the transport so no buffer is touched afterwards.
  void poison(hm_status_t status, const std::string& message) noexcept;
  // A peer's failure may be its revocation seen early (its shm endpoint closed before its tcp
  // notice arrived): waits briefly for the notice and returns the error to report, the
  // revocation's when it came.
  Error settle(const Error& error);
  // Marks the communicator revoked with `why` and tells the peers; never blocks.
  void revoke_because(const std::string& why) noexcept;
  // The router's report of a failed peer (io thread): a revocation revokes this communicator
  // too; any other failure makes the peer a suspect for shrink.
  void on_peer_failure(int peer, hm_status_t status, const std::string& message) noexcept;
  // The communicator of `members` (ranks of this one, ascending), wired through the store under
  // `prefix`; `missing` receives the members that did not take part in time.
  std::shared_ptr<CommunicatorImpl> wire_shrunk(const std::vector<int>& members,
                                                const std::string& prefix, std::set<int>& missing);

  int rank_;
  int size_;
  std::string context_;
  std::unique_ptr<Router> transport_;
  std::chrono::milliseconds timeout_;
  std::size_t chunk_bytes_;
  TransportOptions transport_options_;
  std::optional<std::string> topology_;
  WiringFacts
      facts_;  // what the ranks agreed on at wiring: every rank's locality, the tiers' transports
  CostModel cost_model_;
  TierCosts measured_;  // HOLMES_COST_PROBE
  TierCosts declared_;  // the topology file
  Hierarchy hierarchy_;
  Settings settings_;
  mutable std::mutex algorithm_mutex_;
  ForcedAlgorithms forced_;  // HOLMES_ALGO, then hm_comm_set_algorithm

  std::uint64_t next_sequence_ = 0;  // collectives issued so far (same on every rank)
  std::uint64_t splits_ = 0;
  std::uint64_t shrinks_ = 0;
  std::uint64_t grows_ = 0;
  std::shared_ptr<Rendezvous> store_;
  // Point-to-point messages sent so far per peer and tag: tag 0 (the common case) in a vector,
  // the others in a map. Receives take theirs from the router's ArrivalOrder.
  std::vector<std::uint64_t> sent_to_;
  std::map<std::pair<int, std::uint32_t>, std::uint64_t> tagged_sent_to_;

  mutable std::mutex state_mutex_;
  hm_status_t error_ = HM_SUCCESS;
  std::string error_message_;
  bool closed_ = false;
  std::set<int> suspects_;           // peers the router reported failed (not revoked)
  std::condition_variable revoked_;  // error_ became HM_ERR_ABORTED
  std::atomic<std::uint64_t> progress_{0};
  ScratchSpace scratch_;  // reused by every collective (they run one at a time)
  // Pinned slots for device buffers, made on first use by whichever thread comes first (the
  // caller's, or the op queue's worker).
  std::once_flag staging_made_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<CommunicatorEngines> engines_;  // the engine of each group (group_engines.hpp)
  // Stream ordering (hm_comm_set_cuda_stream): the caller's stream while one is set, and the
  // gate the streams wait on, whose tickets count the calls enqueued on streams. Declared before
  // queue_ so that the gate outlives the proxy's last call.
  std::optional<void*> cuda_stream_;
  std::unique_ptr<DeviceMemory::StreamGate> stream_gate_;
  std::uint32_t stream_tickets_ = 0;
  OpQueue queue_;
  // hm_wait_on_stream: a gate of its own (made with stream_gate_), opened by a worker of its own
  // (the stream waiter), in the order of the waits. Not the op queue's: a request may need a peer's
  // collective that the peer issued after its matching call, and a waiter on the op queue would
  // hold this rank's copy of that collective behind the request.
  std::unique_ptr<DeviceMemory::StreamGate> request_gate_;
  std::uint32_t request_tickets_ = 0;
  OpQueue stream_waiter_;
};

}  // namespace holmes::detail
