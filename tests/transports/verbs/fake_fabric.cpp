#include "fake_fabric.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <unordered_set>
#include <vector>

#include "core/status.hpp"

namespace holmes::verbs::testing {

struct FakeFabric::Port {
  NicPort port;
  int completion_fd = -1;
  int async_fd = -1;
  bool dead = false;
  std::unordered_set<std::uint64_t> pending;  // queue pairs with new completions
  std::deque<NicEvent> events;
  std::vector<Qp*> qps;
  std::function<void(std::span<std::byte>)> tamper;
  ~Port() {
    ::close(completion_fd);
    ::close(async_fd);
  }
};

struct FakeFabric::Qp {
  std::uint64_t id = 0;
  std::uint32_t qpn = 0;
  std::shared_ptr<Port> port;
  QueueShape shape;
  enum class State { kInit, kRts, kError } state = State::kInit;
  QpInfo remote;
  std::uint32_t local_psn = 0;
  struct Recv {
    std::uint64_t wr_id;
    std::byte* data;
    std::size_t size;
  };
  std::deque<Recv> recvs;
  std::deque<WorkCompletion> cq;
  std::uint32_t sends_outstanding = 0;
};

namespace {

void bump(int fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
}

void drain_fd(int fd) {
  std::uint64_t value = 0;
  [[maybe_unused]] const auto n = ::read(fd, &value, sizeof value);
}

WorkCompletion error_completion(std::uint64_t wr_id, const char* what, bool peer_side,
                                bool flushed = false) {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.ok = false;
  wc.flushed = flushed;
  wc.peer_side = peer_side;
  wc.error = what;
  return wc;
}

}  // namespace

class FakeMemoryRegion final : public MemoryRegion {
 public:
  FakeMemoryRegion(std::span<std::byte> memory, std::uint32_t key) : memory_(memory), key_(key) {}
  std::uint32_t lkey() const override { return key_; }
  bool covers(const void* data, std::size_t size) const {
    const auto* p = static_cast<const std::byte*>(data);
    return p >= memory_.data() && p + size <= memory_.data() + memory_.size();
  }

 private:
  std::span<std::byte> memory_;
  std::uint32_t key_;
};

class FakeQueuePair final : public QueuePair {
 public:
  FakeQueuePair(std::shared_ptr<FakeFabric> fabric, std::unique_ptr<FakeFabric::Qp> qp)
      : fabric_(std::move(fabric)), qp_(std::move(qp)) {}

  ~FakeQueuePair() override {
    std::lock_guard lock(fabric_->mutex_);
    fabric_->qps_.erase(qp_->qpn);
    std::erase(qp_->port->qps, qp_.get());
    qp_->port->pending.erase(qp_->id);
  }

  std::uint32_t qp_number() const override { return qp_->qpn; }

  void connect(const QpInfo& remote, std::uint32_t local_psn) override {
    std::lock_guard lock(fabric_->mutex_);
    if (qp_->state != FakeFabric::Qp::State::kInit) {
      fail(HM_ERR_TRANSPORT, "fake: connect outside INIT");
    }
    if (remote.link_layer != qp_->port->port.link_layer) {
      fail(HM_ERR_TRANSPORT, "fake: ibv_modify_qp to RTR failed: link layer mismatch");
    }
    qp_->remote = remote;
    qp_->local_psn = local_psn;
    qp_->state = FakeFabric::Qp::State::kRts;
  }

  void post_recv(std::uint64_t wr_id, std::span<std::byte> slot,
                 const MemoryRegion& region) override {
    std::lock_guard lock(fabric_->mutex_);
    if (!static_cast<const FakeMemoryRegion&>(region).covers(slot.data(), slot.size())) {
      fail(HM_ERR_TRANSPORT, "fake: receive slot outside its registered region");
    }
    if (qp_->state == FakeFabric::Qp::State::kError) {
      qp_->cq.push_back(error_completion(wr_id, "flushed", false, true));
      fabric_->signal(*qp_->port, qp_->id);
      return;
    }
    if (qp_->recvs.size() >= qp_->shape.recv_depth) {
      fail(HM_ERR_TRANSPORT, "fake: ibv_post_recv failed: receive queue full ({} posted)",
           qp_->recvs.size());
    }
    qp_->recvs.push_back({wr_id, slot.data(), slot.size()});
  }

  void post_send(std::uint64_t wr_id, std::span<const std::byte> message,
                 const MemoryRegion& region) override {
    std::lock_guard lock(fabric_->mutex_);
    if (!static_cast<const FakeMemoryRegion&>(region).covers(message.data(), message.size())) {
      fail(HM_ERR_TRANSPORT, "fake: send outside its registered region");
    }
    if (qp_->state == FakeFabric::Qp::State::kInit) {
      fail(HM_ERR_TRANSPORT, "fake: ibv_post_send failed: queue pair not ready to send");
    }
    if (qp_->sends_outstanding >= qp_->shape.send_depth) {
      fail(HM_ERR_TRANSPORT, "fake: ibv_post_send failed: send queue full ({} outstanding)",
           qp_->sends_outstanding);
    }
    ++qp_->sends_outstanding;
    fabric_->send(*qp_, wr_id, message);
  }

  std::size_t poll(std::span<WorkCompletion> out) override {
    std::lock_guard lock(fabric_->mutex_);
    std::size_t n = 0;
    while (n < out.size() && !qp_->cq.empty()) {
      out[n] = std::move(qp_->cq.front());
      qp_->cq.pop_front();
      ++n;
    }
    return n;
  }

 private:
  std::shared_ptr<FakeFabric> fabric_;
  std::unique_ptr<FakeFabric::Qp> qp_;
};

class FakeNic final : public Nic {
 public:
  FakeNic(std::shared_ptr<FakeFabric> fabric, std::shared_ptr<FakeFabric::Port> port)
      : fabric_(std::move(fabric)), port_(std::move(port)) {}

  const NicPort& port() const override { return port_->port; }
  int completion_fd() const override { return port_->completion_fd; }
  int async_fd() const override { return port_->async_fd; }

  std::vector<std::uint64_t> take_completion_events() override {
    std::lock_guard lock(fabric_->mutex_);
    drain_fd(port_->completion_fd);
    std::vector<std::uint64_t> ids(port_->pending.begin(), port_->pending.end());
    port_->pending.clear();
    return ids;
  }

  std::vector<NicEvent> take_async_events() override {
    std::lock_guard lock(fabric_->mutex_);
    drain_fd(port_->async_fd);
    std::vector<NicEvent> events(port_->events.begin(), port_->events.end());
    port_->events.clear();
    return events;
  }

  std::unique_ptr<MemoryRegion> register_memory(std::span<std::byte> memory) override {
    return std::make_unique<FakeMemoryRegion>(memory, ++next_key_);
  }

  std::unique_ptr<QueuePair> create_queue_pair(std::uint64_t id, const QueueShape& shape,
                                               const PathSettings&) override {
    auto qp = std::make_unique<FakeFabric::Qp>();
    std::lock_guard lock(fabric_->mutex_);
    qp->id = id;
    qp->qpn = fabric_->next_qpn_++;
    qp->port = port_;
    qp->shape = shape;
    fabric_->qps_[qp->qpn] = qp.get();
    port_->qps.push_back(qp.get());
    return std::make_unique<FakeQueuePair>(fabric_, std::move(qp));
  }

 private:
  std::shared_ptr<FakeFabric> fabric_;
  std::shared_ptr<FakeFabric::Port> port_;
  std::uint32_t next_key_ = 0;
};

std::unique_ptr<Nic> FakeFabric::open(const std::string& name, const FakePortOptions& options) {
  auto port = std::make_shared<Port>();
  port->completion_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  port->async_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::lock_guard lock(mutex_);
  NicPort& p = port->port;
  p.name = name;
  p.link_layer = options.link_layer;
  p.gid_type = options.gid_type;
  p.active_mtu = options.active_mtu;
  p.rate_gbps = 100;
  p.lid = options.link_layer == LinkLayer::kInfiniBand ? next_lid_ : 0;
  const std::uint16_t n = next_lid_++;
  if (options.link_layer == LinkLayer::kInfiniBand) {
    p.gid = {0xfe,
             0x80,
             0,
             0,
             0,
             0,
             0,
             0,
             0x02,
             0,
             0,
             0,
             0,
             0,
             static_cast<std::uint8_t>(n >> 8),
             static_cast<std::uint8_t>(n)};
  } else {
    p.gid = {0,
             0,
             0,
             0,
             0,
             0,
             0,
             0,
             0,
             0,
             0xff,
             0xff,
             10,
             0,
             static_cast<std::uint8_t>(n >> 8),
             static_cast<std::uint8_t>(n)};
    p.gid_index = 3;
  }
  ports_[name] = port;
  return std::make_unique<FakeNic>(shared_from_this(), port);
}

void FakeFabric::kill(const std::string& name) {
  std::lock_guard lock(mutex_);
  ports_.at(name)->dead = true;
}

void FakeFabric::raise_queue_pair_fatal(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& port = *ports_.at(name);
  for (const Qp* qp : port.qps) {
    port.events.push_back({NicEvent::Kind::kQueuePairFailed, qp->id,
                           "local work queue catastrophic error (IBV_EVENT_QP_FATAL)"});
  }
  bump(port.async_fd);
}

void FakeFabric::raise_device_fatal(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& port = *ports_.at(name);
  port.events.push_back({NicEvent::Kind::kDeviceFailed, 0, "local catastrophic error"});
  bump(port.async_fd);
}

void FakeFabric::tamper(const std::string& name, std::function<void(std::span<std::byte>)> edit) {
  std::lock_guard lock(mutex_);
  ports_.at(name)->tamper = std::move(edit);
}

void FakeFabric::signal(Port& port, std::uint64_t qp_id) {
  port.pending.insert(qp_id);
  bump(port.completion_fd);
}

void FakeFabric::set_error(Qp& qp) {
  if (qp.state == Qp::State::kError) return;
  qp.state = Qp::State::kError;
  for (const auto& r : qp.recvs) qp.cq.push_back(error_completion(r.wr_id, "flushed", false, true));
  qp.recvs.clear();
  signal(*qp.port, qp.id);
}

void FakeFabric::send(Qp& from, std::uint64_t wr_id, std::span<const std::byte> message) {
  const auto done = [&](WorkCompletion wc) {
    --from.sends_outstanding;
    from.cq.push_back(std::move(wc));
    signal(*from.port, from.id);
  };
  if (from.state == Qp::State::kError) {
    done(error_completion(wr_id, "Work Request Flushed Error (IBV_WC_WR_FLUSH_ERR)", false, true));
    return;
  }
  auto it = qps_.find(from.remote.qpn);
  Qp* to = it == qps_.end() ? nullptr : it->second;
  // What the sender was told must be the receiver's real address, QPN and sequence numbers.
  const bool reachable = to != nullptr && !to->port->dead && !from.port->dead &&
                         to->state == Qp::State::kRts && to->remote.qpn == from.qpn &&
                         to->remote.psn == from.local_psn && from.remote.psn == to->local_psn &&
                         from.remote.lid == to->port->port.lid &&
                         from.remote.gid == to->port->port.gid;
  if (!reachable) {
    done(error_completion(
        wr_id, "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR, vendor error 0x81)", true));
    set_error(from);
    return;
  }
  if (to->recvs.empty()) {
    ++rnr_errors_;
    done(error_completion(
        wr_id, "RNR retry counter exceeded (IBV_WC_RNR_RETRY_EXC_ERR): no receive was posted",
        true));
    set_error(from);
    return;
  }
  const auto recv = to->recvs.front();
  to->recvs.pop_front();
  if (message.size() > recv.size) {
    to->cq.push_back(
        error_completion(recv.wr_id, "local length error (IBV_WC_LOC_LEN_ERR)", false));
    signal(*to->port, to->id);
    set_error(*to);
    done(error_completion(wr_id, "remote invalid request error (IBV_WC_REM_INV_REQ_ERR)", true));
    set_error(from);
    return;
  }
  if (!message.empty()) std::memcpy(recv.data, message.data(), message.size());
  if (from.port->tamper) from.port->tamper(std::span<std::byte>(recv.data, message.size()));
  ++messages_;
  WorkCompletion arrived;
  arrived.wr_id = recv.wr_id;
  arrived.byte_len = static_cast<std::uint32_t>(message.size());
  to->cq.push_back(arrived);
  signal(*to->port, to->id);
  WorkCompletion sent;
  sent.wr_id = wr_id;
  done(sent);
}

}  // namespace holmes::verbs::testing
