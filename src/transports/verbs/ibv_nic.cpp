#include "transports/verbs/ibv_nic.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include <fmt/format.h>

#include "core/status.hpp"

namespace holmes::verbs {
namespace {

struct ContextCloser {
  void operator()(ibv_context* c) const { ibv_close_device(c); }
};
struct PdDeleter {
  void operator()(ibv_pd* p) const { ibv_dealloc_pd(p); }
};
struct ChannelDeleter {
  void operator()(ibv_comp_channel* c) const { ibv_destroy_comp_channel(c); }
};
struct CqDeleter {
  void operator()(ibv_cq* c) const { ibv_destroy_cq(c); }
};
struct QpDeleter {
  void operator()(ibv_qp* q) const { ibv_destroy_qp(q); }
};
struct MrDeleter {
  void operator()(ibv_mr* m) const { ibv_dereg_mr(m); }
};
struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};

void set_nonblocking(int fd, const char* what) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    fail(HM_ERR_TRANSPORT, "verbs: cannot make the {} non-blocking: {}", what,
         std::strerror(errno));
  }
}

void* id_to_context(std::uint64_t id) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(id));
}
std::uint64_t context_to_id(void* context) {
  return static_cast<std::uint64_t>(reinterpret_cast<uintptr_t>(context));
}

const char* wc_status_name(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_BAD_RESP_ERR:
      return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
      return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_REM_ABORT_ERR:
      return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_FATAL_ERR:
      return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR:
      return "IBV_WC_GENERAL_ERR";
    default:
      return "IBV_WC_?";
  }
}

// Errors that mean the peer did not answer or refused, rather than a local fault.
bool peer_side(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_BAD_RESP_ERR:
      return true;
    default:
      return false;
  }
}

class IbvMemoryRegion final : public MemoryRegion {
 public:
  explicit IbvMemoryRegion(ibv_mr* mr) : mr_(mr) {}
  std::uint32_t lkey() const override { return mr_->lkey; }

 private:
  std::unique_ptr<ibv_mr, MrDeleter> mr_;
};

struct PortSettings {
  std::uint8_t port_number = 1;
  int gid_index = 0;
  Gid gid{};
  LinkLayer link_layer = LinkLayer::kUnknown;
  std::uint8_t active_mtu = 0;
};

class IbvQueuePair final : public QueuePair {
 public:
  IbvQueuePair(std::unique_ptr<ibv_cq, CqDeleter> cq, std::unique_ptr<ibv_qp, QpDeleter> qp,
               const PortSettings& port, const PathSettings& path)
      : cq_(std::move(cq)), qp_(std::move(qp)), port_(port), path_(path) {}

  std::uint32_t qp_number() const override { return qp_->qp_num; }

  void connect(const QpInfo& remote, std::uint32_t local_psn) override {
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = static_cast<ibv_mtu>(std::min(port_.active_mtu, remote.mtu));
    rtr.dest_qp_num = remote.qpn;
    rtr.rq_psn = remote.psn;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;  // 0.64 ms; credits keep receivers from ever being not ready
    rtr.ah_attr.port_num = port_.port_number;
    rtr.ah_attr.sl = path_.service_level;
    rtr.ah_attr.src_path_bits = 0;
    // RoCE always routes by GID; InfiniBand by LID, with a global route header only towards
    // another subnet.
    const bool global = port_.link_layer == LinkLayer::kEthernet ||
                        gid_subnet_prefix(remote.gid) != gid_subnet_prefix(port_.gid);
    if (port_.link_layer == LinkLayer::kInfiniBand) rtr.ah_attr.dlid = remote.lid;
    if (global) {
      rtr.ah_attr.is_global = 1;
      std::memcpy(rtr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
      rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(port_.gid_index);
      rtr.ah_attr.grh.hop_limit = 255;
      rtr.ah_attr.grh.traffic_class = path_.traffic_class;
      rtr.ah_attr.grh.flow_label = 0;
    }
    if (const int rc =
            ibv_modify_qp(qp_.get(), &rtr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_modify_qp to RTR (remote QPN {:#x}, {} {}, MTU {}) failed: {}",
           remote.qpn,
           remote.link_layer == LinkLayer::kInfiniBand ? fmt::format("LID {:#x}", remote.lid)
                                                       : std::string("GID"),
           format_gid(remote.gid), mtu_bytes(rtr.path_mtu), std::strerror(rc));
    }
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = path_.ack_timeout;
    rts.retry_cnt = path_.retry_count;
    rts.rnr_retry = 7;  // 7 = retry forever; credits make it never happen
    rts.sq_psn = local_psn;
    rts.max_rd_atomic = 1;
    if (const int rc =
            ibv_modify_qp(qp_.get(), &rts,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_modify_qp to RTS failed: {}", std::strerror(rc));
    }
  }

  void post_recv(std::uint64_t wr_id, std::span<std::byte> slot,
                 const MemoryRegion& region) override {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(slot.data());
    sge.length = static_cast<std::uint32_t>(slot.size());
    sge.lkey = region.lkey();
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(qp_.get(), &wr, &bad); rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_post_recv failed: {}", std::strerror(rc));
    }
  }

  void post_send(std::uint64_t wr_id, std::span<const std::byte> message,
                 const MemoryRegion& region) override {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(message.data());
    sge.length = static_cast<std::uint32_t>(message.size());
    sge.lkey = region.lkey();
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_post_send failed: {}", std::strerror(rc));
    }
  }

  std::size_t poll(std::span<WorkCompletion> out) override {
    ibv_wc wc[64];
    const int want = static_cast<int>(std::min<std::size_t>(out.size(), 64));
    const int got = ibv_poll_cq(cq_.get(), want, wc);
    if (got < 0) fail(HM_ERR_TRANSPORT, "ibv_poll_cq failed ({})", got);
    for (int i = 0; i < got; ++i) {
      WorkCompletion& w = out[static_cast<std::size_t>(i)];
      w.wr_id = wc[i].wr_id;
      w.ok = wc[i].status == IBV_WC_SUCCESS;
      w.flushed = wc[i].status == IBV_WC_WR_FLUSH_ERR;
      w.peer_side = peer_side(wc[i].status);
      w.byte_len = wc[i].byte_len;
      w.error = w.ok ? std::string()
                     : fmt::format("{} ({}, vendor error {:#x})", ibv_wc_status_str(wc[i].status),
                                   wc_status_name(wc[i].status), wc[i].vendor_err);
    }
    return static_cast<std::size_t>(got);
  }

 private:
  // Destroyed in reverse: the QP before its completion queue.
  std::unique_ptr<ibv_cq, CqDeleter> cq_;
  std::unique_ptr<ibv_qp, QpDeleter> qp_;
  PortSettings port_;
  PathSettings path_;
};

class IbvNic final : public Nic {
 public:
  explicit IbvNic(const PortChoice& choice) {
    const PortInfo& info = choice.port;
    int count = 0;
    std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
    ibv_device* device = nullptr;
    for (int i = 0; list && i < count; ++i) {
      if (info.device == ibv_get_device_name(list.get()[i])) device = list.get()[i];
    }
    if (device == nullptr) fail(HM_ERR_UNSUPPORTED, "RDMA device {} is gone", info.device);
    context_.reset(ibv_open_device(device));
    if (!context_) {
      fail(HM_ERR_TRANSPORT, "cannot open RDMA device {}: {}", info.device, std::strerror(errno));
    }
    if (const int rc = ibv_query_device(context_.get(), &device_attr_); rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_query_device on {} failed: {}", info.device, std::strerror(rc));
    }
    ibv_port_attr attr{};
    const auto port_number = static_cast<std::uint8_t>(info.port);
    if (const int rc = ibv_query_port(context_.get(), port_number, &attr); rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_query_port on {} failed: {}", info.name(), std::strerror(rc));
    }
    if (attr.state != IBV_PORT_ACTIVE) {
      fail(HM_ERR_UNSUPPORTED, "RDMA port {} is {}, not ACTIVE", info.name(),
           port_state_name(attr.state));
    }
    ibv_gid gid{};
    if (const int rc = ibv_query_gid(context_.get(), port_number, choice.gid.index, &gid);
        rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_query_gid({}, index {}) failed: {}", info.name(),
           choice.gid.index, std::strerror(rc));
    }
    port_.name = info.name();
    port_.link_layer =
        attr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet : LinkLayer::kInfiniBand;
    port_.lid = attr.lid;
    port_.gid_index = choice.gid.index;
    std::memcpy(port_.gid.data(), gid.raw, port_.gid.size());
    if (gid_is_zero(port_.gid)) {
      fail(HM_ERR_UNSUPPORTED, "GID {} of {} is empty", choice.gid.index, info.name());
    }
    port_.gid_type = choice.gid.type;
    port_.active_mtu = static_cast<std::uint8_t>(attr.active_mtu);
    port_.rate_gbps = rate_from_codes(attr.active_speed, attr.active_width).value_or(0);
    settings_ = {port_number, port_.gid_index, port_.gid, port_.link_layer, port_.active_mtu};

    pd_.reset(ibv_alloc_pd(context_.get()));
    if (!pd_)
      fail(HM_ERR_TRANSPORT, "ibv_alloc_pd on {} failed: {}", info.name(), std::strerror(errno));
    channel_.reset(ibv_create_comp_channel(context_.get()));
    if (!channel_) {
      fail(HM_ERR_TRANSPORT, "ibv_create_comp_channel on {} failed: {}", info.name(),
           std::strerror(errno));
    }
    set_nonblocking(channel_->fd, "completion channel");
    set_nonblocking(context_->async_fd, "device event fd");
  }

  const NicPort& port() const override { return port_; }
  int completion_fd() const override { return channel_->fd; }
  int async_fd() const override { return context_->async_fd; }

  std::vector<std::uint64_t> take_completion_events() override {
    std::vector<std::uint64_t> ids;
    std::unordered_set<std::uint64_t> seen;
    for (;;) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      if (ibv_get_cq_event(channel_.get(), &cq, &context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        fail(HM_ERR_TRANSPORT, "ibv_get_cq_event failed: {}", std::strerror(errno));
      }
      // Acknowledge at once: ibv_destroy_cq waits for every event it handed out to be acked.
      ibv_ack_cq_events(cq, 1);
      // Re-arm before the caller polls, so a completion after its last poll raises an event.
      if (const int rc = ibv_req_notify_cq(cq, 0); rc != 0) {
        fail(HM_ERR_TRANSPORT, "ibv_req_notify_cq failed: {}", std::strerror(rc));
      }
      const std::uint64_t id = context_to_id(context);
      if (seen.insert(id).second) ids.push_back(id);
    }
    return ids;
  }

  std::vector<NicEvent> take_async_events() override {
    std::vector<NicEvent> events;
    for (;;) {
      ibv_async_event event{};
      if (ibv_get_async_event(context_.get(), &event) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        fail(HM_ERR_TRANSPORT, "ibv_get_async_event failed: {}", std::strerror(errno));
      }
      NicEvent e;
      e.text = fmt::format("{} ({})", ibv_event_type_str(event.event_type),
                           static_cast<int>(event.event_type));
      switch (event.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
          e.kind = NicEvent::Kind::kQueuePairFailed;
          e.queue_pair_id = context_to_id(event.element.qp->qp_context);
          break;
        case IBV_EVENT_CQ_ERR:
          e.kind = NicEvent::Kind::kQueuePairFailed;  // one completion queue per queue pair
          e.queue_pair_id = context_to_id(event.element.cq->cq_context);
          break;
        case IBV_EVENT_DEVICE_FATAL:
          e.kind = NicEvent::Kind::kDeviceFailed;
          break;
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_GID_CHANGE:
          e.text = fmt::format("{} on port {}", e.text, event.element.port_num);
          break;
        default:
          break;
      }
      ibv_ack_async_event(&event);
      events.push_back(std::move(e));
    }
    return events;
  }

  std::unique_ptr<MemoryRegion> register_memory(std::span<std::byte> memory) override {
    ibv_mr* mr = ibv_reg_mr(pd_.get(), memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) {
      const int error = errno;
      if (error == ENOMEM || error == EAGAIN) {
        rlimit limit{};
        ::getrlimit(RLIMIT_MEMLOCK, &limit);
        fail(HM_ERR_OUT_OF_MEMORY,
             "cannot register {} bytes with {}: {} (locked-memory limit {}; raise it, e.g. "
             "ulimit -l unlimited, or lower HOLMES_IB_SLOTS / HOLMES_IB_SLOT_BYTES)",
             memory.size(), port_.name, std::strerror(error),
             limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                             : fmt::format("{} bytes", limit.rlim_cur));
      }
      fail(HM_ERR_TRANSPORT, "cannot register {} bytes with {}: {}", memory.size(), port_.name,
           std::strerror(error));
    }
    return std::make_unique<IbvMemoryRegion>(mr);
  }

  std::unique_ptr<QueuePair> create_queue_pair(std::uint64_t id, const QueueShape& shape,
                                               const PathSettings& path) override {
    const auto max_wr = static_cast<std::uint32_t>(device_attr_.max_qp_wr);
    const std::uint32_t cqes = shape.send_depth + shape.recv_depth;
    if (shape.send_depth > max_wr || shape.recv_depth > max_wr ||
        cqes > static_cast<std::uint32_t>(device_attr_.max_cqe)) {
      fail(HM_ERR_TRANSPORT,
           "{} allows {} work requests per queue and {} completions per queue; {} + {} asked "
           "(lower HOLMES_IB_SLOTS)",
           port_.name, max_wr, device_attr_.max_cqe, shape.send_depth, shape.recv_depth);
    }
    std::unique_ptr<ibv_cq, CqDeleter> cq(ibv_create_cq(context_.get(), static_cast<int>(cqes),
                                                        id_to_context(id), channel_.get(), 0));
    if (!cq) {
      fail(HM_ERR_TRANSPORT, "ibv_create_cq ({} entries) on {} failed: {}", cqes, port_.name,
           std::strerror(errno));
    }
    if (const int rc = ibv_req_notify_cq(cq.get(), 0); rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_req_notify_cq failed: {}", std::strerror(rc));
    }
    ibv_qp_init_attr init{};
    init.qp_context = id_to_context(id);
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap.max_send_wr = shape.send_depth;
    init.cap.max_recv_wr = shape.recv_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = 0;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    std::unique_ptr<ibv_qp, QpDeleter> qp(ibv_create_qp(pd_.get(), &init));
    if (!qp) {
      fail(HM_ERR_TRANSPORT, "ibv_create_qp (RC, {} sends, {} receives) on {} failed: {}",
           shape.send_depth, shape.recv_depth, port_.name, std::strerror(errno));
    }
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = settings_.port_number;
    attr.qp_access_flags = 0;  // sends and receives only: no remote access to our memory
    if (const int rc = ibv_modify_qp(
            qp.get(), &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
      fail(HM_ERR_TRANSPORT, "ibv_modify_qp to INIT on {} failed: {}", port_.name,
           std::strerror(rc));
    }
    return std::make_unique<IbvQueuePair>(std::move(cq), std::move(qp), settings_, path);
  }

 private:
  // Destroyed in reverse: channel and protection domain before the device context.
  std::unique_ptr<ibv_context, ContextCloser> context_;
  std::unique_ptr<ibv_pd, PdDeleter> pd_;
  std::unique_ptr<ibv_comp_channel, ChannelDeleter> channel_;
  ibv_device_attr device_attr_{};
  NicPort port_;
  PortSettings settings_;
};

}  // namespace

std::unique_ptr<Nic> open_ibv_nic(const PortChoice& choice) {
  return std::make_unique<IbvNic>(choice);
}

}  // namespace holmes::verbs
