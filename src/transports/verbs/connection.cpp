#include "transports/verbs/transport.hpp"

#include <cstdlib>
#include <cstring>

#include "core/status.hpp"
#include "transports/verbs/qp_info.hpp"

namespace holmes::verbs {
namespace {

// Page-aligned, zeroed memory for a connection's slots.
SlotMemory allocate_slots(std::size_t bytes) {
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  auto* memory = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (memory == nullptr) {
    fail(HM_ERR_OUT_OF_MEMORY, "verbs: cannot allocate {} bytes of message slots", rounded);
  }
  std::memset(memory, 0, rounded);
  return SlotMemory(memory);
}

}  // namespace

std::unique_ptr<Connection> VerbsTransport::make_connection(int peer, Direction direction) {
  auto c = std::make_unique<Connection>();
  c->id = next_id_++;
  c->peer = peer;
  c->outbound = direction == Direction::kOutbound;
  const bool outbound = c->outbound;
  // The data direction gets the big slots; the other only carries credits and goodbyes.
  const std::uint32_t data_slots = config_.data_slots;
  const std::uint32_t data_bytes = config_.slot_bytes;
  const std::uint32_t control_slots = config_.control_slots;
  const auto control_bytes = static_cast<std::uint32_t>(kControlSlotBytes);
  c->recv_slots = outbound ? control_slots : data_slots;
  c->recv_slot_bytes = outbound ? control_bytes : data_bytes;
  c->send_slots = outbound ? data_slots : control_slots;
  c->send_slot_bytes = outbound ? data_bytes : control_bytes;
  const std::size_t bytes = std::size_t{c->recv_slots} * c->recv_slot_bytes +
                            std::size_t{c->send_slots} * c->send_slot_bytes;
  c->memory = allocate_slots(bytes);
  c->region = nic_->register_memory({c->memory.get(), bytes});
  c->qp = nic_->create_queue_pair(c->id, {c->send_slots, c->recv_slots}, path_);
  // Receives may be posted in INIT: they are in place before the peer can send.
  for (std::uint32_t i = 0; i < c->recv_slots; ++i) {
    c->qp->post_recv(kRecvBit | i, c->recv_slot(i), *c->region);
  }
  for (std::uint32_t i = c->send_slots; i-- > 0;) c->free_send_slots.push_back(i);
  c->local_psn = random_() & 0xffffffu;
  return c;
}

QpInfo VerbsTransport::local_info(const Connection& c) const {
  const auto& port = nic_->port();
  QpInfo info;
  info.link_layer = port.link_layer;
  info.gid_type = port.gid_type;
  info.mtu = port.active_mtu;
  info.lid = port.lid;
  info.gid = port.gid;
  info.qpn = c.qp->qp_number();
  info.psn = c.local_psn;
  info.recv_slots = c.recv_slots;
  info.recv_slot_bytes = c.recv_slot_bytes;
  info.device = port.name.substr(0, kMaxDeviceNameBytes);
  return info;
}

void VerbsTransport::finish_connection(Connection& c, const QpInfo& remote) {
  c.qp->connect(remote, c.local_psn);
  c.credits = CreditWindow(remote.recv_slots, c.recv_slots);
  c.remote_slot_bytes = remote.recv_slot_bytes;
  {
    std::lock_guard lock(devices_mutex_);
    remote_devices_[static_cast<std::size_t>(c.peer)] = remote.device;
  }
  c.ready = true;
}

}  // namespace holmes::verbs
