// An RDMA fabric in memory, for running the verbs transport's logic on machines without RDMA
// hardware. It implements the Nic interface (src/transports/verbs/nic.hpp) with the semantics
// the transport relies on, and is strict where hardware would be silent or slow:
// - A send lands in the oldest receive posted on the queue pair it was connected to, with a
//   completion on each side; the sender's view of the peer (QPN, PSN, LID/GID) must match the
//   peer's real queue pair, or the send fails as on a real fabric (retries exhausted).
// - A send with no receive posted at the peer is an error (RNR) and is counted: with correct
//   credits it never happens (hardware would retry forever).
// - Posting more work than the queue pair's depth, or memory outside the registered region,
//   fails, as do posts in the wrong state. After an error the queue pair flushes everything.
// - A queue pair destroyed or a port killed stops answering: sends to it fail with
//   IBV_WC_RETRY_EXC_ERR, as when a host dies.
// Completion and device events are eventfds, so the transport sleeps in epoll as on hardware.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "transports/verbs/nic.hpp"

namespace holmes::verbs::testing {

struct FakePortOptions {
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  GidType gid_type = GidType::kIbOrRoceV1;
  std::uint8_t active_mtu = 5;  // 4096
};

class FakeFabric : public std::enable_shared_from_this<FakeFabric> {
 public:
  static std::shared_ptr<FakeFabric> create() {
    return std::shared_ptr<FakeFabric>(new FakeFabric);
  }

  // A port named `name` ("fake0:1") on this fabric.
  std::unique_ptr<Nic> open(const std::string& name, const FakePortOptions& options = {});

  // The port stops answering: sends to its queue pairs fail with IBV_WC_RETRY_EXC_ERR.
  void kill(const std::string& name);
  // Raises a device event on every queue pair of the port (IBV_EVENT_QP_FATAL).
  void raise_queue_pair_fatal(const std::string& name);
  // Raises IBV_EVENT_DEVICE_FATAL on the port.
  void raise_device_fatal(const std::string& name);
  // Called on the bytes of every message sent from the port, after they are copied to the
  // receiver (to forge what a broken or hostile peer would send).
  void tamper(const std::string& name, std::function<void(std::span<std::byte>)> edit);

  std::size_t rnr_errors() const { return rnr_errors_.load(); }
  std::size_t messages() const { return messages_.load(); }

  struct Port;
  struct Qp;

 private:
  FakeFabric() = default;
  friend class FakeNic;
  friend class FakeQueuePair;

  void signal(Port& port, std::uint64_t qp_id);                                  // needs mutex_
  void set_error(Qp& qp);                                                        // needs mutex_
  void send(Qp& from, std::uint64_t wr_id, std::span<const std::byte> message);  // needs mutex_

  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Port>> ports_;
  std::unordered_map<std::uint32_t, Qp*> qps_;  // by QPN
  std::uint32_t next_qpn_ = 0x100;
  std::uint16_t next_lid_ = 1;
  std::atomic<std::size_t> rnr_errors_{0};
  std::atomic<std::size_t> messages_{0};
};

}  // namespace holmes::verbs::testing
