// The part of an RDMA device the verbs transport uses, as an interface: the transport's logic
// (handshakes, credits, pieces, goodbyes, failures) is written against it, libibverbs implements
// it on hardware (ibv_nic.hpp), and the tests implement it in memory so that all of that logic
// runs on machines without an RDMA device.
//
// Model: one Nic per transport (an opened port with a protection domain and one completion
// channel); per peer connection one RC QueuePair with its own completion queue on that
// channel, and one registered MemoryRegion holding its slots. Every send is signaled, so every
// posted work request ends in exactly one WorkCompletion (success, error or flush).
// Not thread-safe: the transport calls it from its progress thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transports/verbs/port_discovery.hpp"
#include "transports/verbs/qp_info.hpp"

namespace holmes::verbs {

// The local port as peers must see it.
struct NicPort {
  std::string name;  // "mlx5_0:1"
  LinkLayer link_layer = LinkLayer::kUnknown;
  std::uint16_t lid = 0;
  int gid_index = 0;
  Gid gid{};
  GidType gid_type = GidType::kUnknown;
  std::uint8_t active_mtu = 0;  // ibv_mtu code
  double rate_gbps = 0;
};

struct WorkCompletion {
  std::uint64_t wr_id = 0;
  bool ok = true;
  // IBV_WC_WR_FLUSH_ERR: the queue pair was already in the error state (after an earlier error).
  bool flushed = false;
  // The peer did not answer or refused (retries exhausted, remote errors), as opposed to a
  // local problem: decides between HM_ERR_PEER_FAILED and HM_ERR_TRANSPORT.
  bool peer_side = false;
  std::uint32_t byte_len = 0;  // receives: bytes that arrived
  std::string error;  // e.g. "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR, ...)"
};

// An asynchronous event of the device (ibv_get_async_event).
struct NicEvent {
  enum class Kind { kQueuePairFailed, kDeviceFailed, kInformational };
  Kind kind = Kind::kInformational;
  std::uint64_t queue_pair_id = 0;  // kQueuePairFailed
  std::string text;  // e.g. "IBV_EVENT_QP_FATAL (local work queue catastrophic error)"
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual std::uint32_t lkey() const = 0;
};

struct QueueShape {
  std::uint32_t send_depth = 0;  // sends in flight at most
  std::uint32_t recv_depth = 0;  // receives posted at most
};

// Which RTR/RTS settings a queue pair uses (config.hpp).
struct PathSettings {
  std::uint8_t service_level = 0;
  std::uint8_t traffic_class = 0;
  std::uint8_t ack_timeout = 18;
  std::uint8_t retry_count = 7;
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual std::uint32_t qp_number() const = 0;
  // INIT -> RTR -> RTS toward `remote`; this end's first packet sequence number is `local_psn`.
  // Throws HM_ERR_TRANSPORT.
  virtual void connect(const QpInfo& remote, std::uint32_t local_psn) = 0;
  // `slot` lies inside memory registered as `region`. Throw HM_ERR_TRANSPORT.
  virtual void post_recv(std::uint64_t wr_id, std::span<std::byte> slot,
                         const MemoryRegion& region) = 0;
  virtual void post_send(std::uint64_t wr_id, std::span<const std::byte> message,
                         const MemoryRegion& region) = 0;
  // Takes up to out.size() completions; returns how many.
  virtual std::size_t poll(std::span<WorkCompletion> out) = 0;
};

class Nic {
 public:
  virtual ~Nic() = default;
  virtual const NicPort& port() const = 0;
  // Readable when completion events may be waiting (the completion channel's fd).
  virtual int completion_fd() const = 0;
  // Readable when device events may be waiting; -1 when there are none to watch.
  virtual int async_fd() const = 0;
  // Reads every pending completion event without blocking, re-arms those completion queues, and
  // returns the ids of the queue pairs that may have completions to poll.
  virtual std::vector<std::uint64_t> take_completion_events() = 0;
  virtual std::vector<NicEvent> take_async_events() = 0;
  // Registers `memory` for local access by sends and receives. Throws (HM_ERR_OUT_OF_MEMORY
  // when the pinned-memory limit is reached).
  virtual std::unique_ptr<MemoryRegion> register_memory(std::span<std::byte> memory) = 0;
  // An RC queue pair in the INIT state with its own completion queue; `id` comes back from
  // take_completion_events() and in NicEvents. Throws HM_ERR_TRANSPORT.
  virtual std::unique_ptr<QueuePair> create_queue_pair(std::uint64_t id, const QueueShape& shape,
                                                       const PathSettings& path) = 0;
};

}  // namespace holmes::verbs
